import { type ArgumentsHost, BadRequestException, HttpException, NotFoundException, PayloadTooLargeException } from '@nestjs/common';
import { OpenAiError } from '../openai-protocol';
import { OpenAiErrorFilter } from './openai-error.filter';

interface Sent {
  status?: number;
  body?: unknown;
}

function host(sent: Sent, headersSent = false): ArgumentsHost {
  const res = {
    headersSent,
    status(code: number) {
      sent.status = code;
      return res;
    },
    json(body: unknown) {
      sent.body = body;
    },
  };
  const req = { method: 'POST', url: '/v1/nowhere', headers: {} };
  return { switchToHttp: () => ({ getResponse: () => res, getRequest: () => req }) } as unknown as ArgumentsHost;
}

const internal = (e: unknown): OpenAiError => (e instanceof OpenAiError ? e : new OpenAiError(500, 'The app had an error.', null, 'internal_error'));

describe('OpenAiErrorFilter', () => {
  const filter = new OpenAiErrorFilter(internal);

  it('answers an unknown route with the method and URL', () => {
    const sent: Sent = {};
    filter.catch(new NotFoundException('Cannot POST /v1/nowhere'), host(sent));
    expect(sent).toEqual({
      status: 404,
      body: { error: { message: 'Unknown request URL: POST /v1/nowhere', type: 'invalid_request_error', param: null, code: 'unknown_url' } },
    });
  });

  it('answers a body that is not JSON as OpenAI does, keeping the parser message', () => {
    const sent: Sent = {};
    filter.catch(new BadRequestException('Unexpected token } in JSON'), host(sent));
    expect(sent).toEqual({
      status: 400,
      body: {
        error: {
          message: 'We could not parse the JSON body of your request. (Unexpected token } in JSON)',
          type: 'invalid_request_error',
          param: null,
          code: 'invalid_json',
        },
      },
    });
  });

  it('names a body that is too large, and keeps other HTTP statuses with no code', () => {
    const big: Sent = {};
    filter.catch(new PayloadTooLargeException('request entity too large'), host(big));
    expect(big).toEqual({
      status: 413,
      body: { error: { message: 'request entity too large', type: 'invalid_request_error', param: null, code: 'request_too_large' } },
    });
    const other: Sent = {};
    filter.catch(new HttpException('nope', 405), host(other));
    expect(other).toEqual({ status: 405, body: { error: { message: 'nope', type: 'invalid_request_error', param: null, code: null } } });
  });

  it("hands anything else to the app's mapping", () => {
    const thrown: Sent = {};
    filter.catch(new Error('secret detail'), host(thrown));
    expect(thrown).toEqual({ status: 500, body: { error: { message: 'The app had an error.', type: 'server_error', param: null, code: 'internal_error' } } });
    const refusal: Sent = {};
    filter.catch(new OpenAiError(429, 'slow down', null, 'rate_limited'), host(refusal));
    expect(refusal).toEqual({ status: 429, body: { error: { message: 'slow down', type: 'invalid_request_error', param: null, code: 'rate_limited' } } });
  });

  it('writes nothing once the headers are out (a stream already answering)', () => {
    const sent: Sent = {};
    filter.catch(new Error('late'), host(sent, true));
    expect(sent).toEqual({});
  });
});
