/** The part of Express's response the controller uses (the project carries no Express typings). */
export interface HttpResponse {
  status(code: number): HttpResponse;
  setHeader(name: string, value: string): HttpResponse;
  json(body: unknown): void;
  write(chunk: string): boolean;
  end(): void;
  flushHeaders(): void;
  readonly headersSent: boolean;
}
