import * as http from 'http';
import type { AddressInfo } from 'net';

/**
 * A minimal in-process server speaking the two Schema Registry REST calls the
 * client uses, so the client's HTTP handling (paths, content type, auth, errors)
 * is exercised for real; it keeps schemas in a map like a registry would.
 */
export function startFakeSchemaRegistry(auth?: string): Promise<{ url: string; server: http.Server; requests: string[] }> {
  const schemas: string[] = [];
  const requests: string[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      requests.push(`${req.method} ${req.url} ${req.headers['content-type']}`);
      if (auth && req.headers.authorization !== auth) {
        res.statusCode = 401;
        return res.end('{"error_code":401}');
      }
      const register = /^\/subjects\/([^/]+)\/versions$/.exec(req.url ?? '');
      const fetchById = /^\/schemas\/ids\/(\d+)$/.exec(req.url ?? '');
      if (req.method === 'POST' && register) {
        const schema = (JSON.parse(body) as { schema: string }).schema;
        let id = schemas.indexOf(schema);
        if (id < 0) id = schemas.push(schema) - 1;
        return res.end(JSON.stringify({ id: id + 100 }));
      }
      if (req.method === 'GET' && fetchById) {
        const schema = schemas[Number(fetchById[1]) - 100];
        if (!schema) {
          res.statusCode = 404;
          return res.end('{"error_code":40403}');
        }
        return res.end(JSON.stringify({ schema }));
      }
      res.statusCode = 404;
      res.end();
    });
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server, requests })),
  );
}
