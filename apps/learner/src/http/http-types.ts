/**
 * The parts of Express's request and response the learner uses. The repo has
 * no @types/express, and these few members are all that is needed.
 */
export interface HttpRequest {
  headers: Record<string, string | string[] | undefined>;
}

export interface HttpResponse {
  status(code: number): HttpResponse;
  json(body: unknown): unknown;
  setHeader(name: string, value: string): unknown;
}
