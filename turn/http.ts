// The model's requests over Node's own HTTP client, in the shape of fetch that the openai client takes
// (its `fetch` option). The client's request, its stream, its errors and retries stay the SDK's; what
// changes is the layer under it: a request written straight to a kept-alive socket and its answer
// read from it, where Node's fetch (undici) makes a Request, a body stream and a Response of its own
// at every step, some half a millisecond of a turn's own time.
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { Readable } from "node:stream";

/** One pool of kept-alive connections per scheme, for the process. */
const agents = { http: new HttpAgent({ keepAlive: true }), https: new HttpsAgent({ keepAlive: true }) };

/** Statuses whose answer has no body, which a Response refuses to be given one for. */
const NO_BODY = new Set([101, 204, 205, 304]);

function headersOf(res: IncomingMessage): Headers {
  const headers = new Headers();
  const raw = res.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    try {
      headers.append(raw[i] as string, raw[i + 1] as string);
    } catch {
      // A header Headers won't hold (a name or value it finds invalid) is left out, as fetch leaves it.
    }
  }
  return headers;
}

/**
 * fetch over node:http and node:https: the method, headers, body and signal of `init`; resolves with
 * the answer as a Response whose body streams as it arrives, and rejects as fetch does when no answer
 * comes (the connection refused or cut, the signal aborted), with Node's error as the cause.
 */
export function nodeFetch(input: string | URL | Request, init: RequestInit = {}): Promise<Response> {
  let url: URL;
  try {
    url = new URL(input instanceof Request ? input.url : String(input));
  } catch (e) {
    return Promise.reject(new TypeError(`invalid URL: ${(e as Error).message}`));
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return Promise.reject(new TypeError(`not an HTTP URL: ${url.protocol}`));
  const headers: Record<string, string> = {};
  new Headers(init.headers).forEach((value, name) => (headers[name] = value));
  const body = init.body;
  if (body !== undefined && body !== null && typeof body !== "string" && !(body instanceof Uint8Array)) {
    return Promise.reject(new TypeError("only a string or bytes can be sent as a body"));
  }
  const signal = init.signal ?? undefined;
  const https = url.protocol === "https:";
  return new Promise((resolve, reject) => {
    const failed = (e: Error) => reject(new TypeError("fetch failed", { cause: e }));
    let req;
    try {
      req = (https ? httpsRequest : httpRequest)(url, { method: init.method ?? "GET", headers, agent: https ? agents.https : agents.http, ...(signal ? { signal } : {}) }, (res) => {
        const status = res.statusCode ?? 0;
        try {
          const stream = NO_BODY.has(status) || init.method === "HEAD" ? null : (Readable.toWeb(res) as ReadableStream<Uint8Array>);
          if (stream === null) res.resume();
          resolve(new Response(stream, { status, statusText: res.statusMessage ?? "", headers: headersOf(res) }));
        } catch (e) {
          // A status a Response can't have (outside 200 to 599): no answer to speak of.
          res.destroy();
          failed(e as Error);
        }
      });
    } catch (e) {
      failed(e as Error);
      return;
    }
    req.on("error", (e) => (signal?.aborted ? reject(signal.reason ?? e) : failed(e)));
    req.end(body ?? undefined);
  });
}
