/** The part of Express's request and response the HTTP apps (serve, gateway) use (the project carries no Express typings). */
export interface HttpResponse {
  status(code: number): HttpResponse;
  setHeader(name: string, value: string): HttpResponse;
  json(body: unknown): void;
  write(chunk: string): boolean;
  once(event: 'drain' | 'close', listener: () => void): void;
  end(): void;
  flushHeaders(): void;
  readonly headersSent: boolean;
  readonly writableEnded: boolean;
  /** The connection is closed (the client went away): nothing more can be written. */
  readonly destroyed: boolean;
}

export interface HttpRequest {
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  readonly method: string;
  readonly url: string;
}
