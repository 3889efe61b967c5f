// The fetch an MCP tool over Streamable HTTP is reached with: the global fetch, each answer's body
// read only so far. The SDK reads a JSON answer whole and an event stream an event at a time, each
// held whole until it ends: a tool that answered without end (a body of gigabytes, an event that
// never ends) would have it all held, and the daemon with it.
import { EventSpan } from "../../turn/http.js";

/** The most of one answer of a tool's that is not an event stream (a call's result is cut to 32 KiB after). */
export const TOOL_BODY_MAX = 16 * 1024 * 1024;
/** The most of one event of a tool's event stream, from one blank line to the next. */
export const TOOL_EVENT_MAX = 16 * 1024 * 1024;

/** An answer's body, erroring past its bound: an event stream's (`events`) an event at a time, any other's whole. */
function boundedBody(body: ReadableStream<Uint8Array>, events: boolean): ReadableStream<Uint8Array> {
  let total = 0;
  const span = new EventSpan();
  return body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        total += chunk.length;
        if (events ? span.next(chunk) > TOOL_EVENT_MAX : total > TOOL_BODY_MAX) {
          controller.error(new Error(events ? `the tool sent an event of over ${TOOL_EVENT_MAX} bytes with no end` : `the tool's answer ran past ${TOOL_BODY_MAX} bytes`));
          return;
        }
        controller.enqueue(chunk);
      },
    }),
  );
}

/** fetch, each answer's body bounded (a redirect's, with no body, as it is). */
export function boundedFetch(inner: typeof fetch = fetch): typeof fetch {
  return async (input, init) => {
    const res = await inner(input, init);
    if (!res.body || res.status < 200 || res.status > 599) return res;
    const events = (res.headers.get("content-type") ?? "").toLowerCase().includes("text/event-stream");
    return new Response(boundedBody(res.body, events), { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}
