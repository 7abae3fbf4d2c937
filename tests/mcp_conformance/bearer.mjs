// Preloaded into the MCP conformance suite (node --import): the suite has no option for request headers
// and kb serve's /mcp needs a bearer token, so this adds `Authorization: Bearer $KB_TOKEN` to each request
// the suite sends (its SDK client uses fetch, the DNS rebinding scenario undici's request). Nothing else
// is changed: the Host and Origin a scenario sets reach kb serve as they are.
import { Agent, setGlobalDispatcher } from 'undici';

const authorization = `Bearer ${process.env.KB_TOKEN ?? ''}`;

function withAuthorization(headers) {
  if (Array.isArray(headers)) {
    const present = headers.some((value, i) => i % 2 === 0 && String(value).toLowerCase() === 'authorization');
    return present ? headers : [...headers, 'authorization', authorization];
  }
  const present = Object.keys(headers ?? {}).some((name) => name.toLowerCase() === 'authorization');
  return present ? headers : { ...(headers ?? {}), authorization };
}

setGlobalDispatcher(
  new Agent().compose((dispatch) => (options, handler) =>
    dispatch({ ...options, headers: withAuthorization(options.headers) }, handler),
  ),
);

const fetchOf = globalThis.fetch;
globalThis.fetch = (input, init = {}) => {
  const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : undefined));
  if (!headers.has('authorization')) headers.set('authorization', authorization);
  return fetchOf(input, { ...init, headers });
};
