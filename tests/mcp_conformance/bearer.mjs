// Preloaded into the MCP conformance suite (node --import): the suite has no option for request headers
// and kb serve's /mcp needs a bearer token, so this adds `Authorization: Bearer $KB_TOKEN` to each request
// the suite sends (its SDK client uses fetch, the DNS rebinding scenario undici's request, the header
// validation scenarios node:http's request). Nothing else is changed: the Host and Origin a scenario sets
// reach kb serve as they are.
import http from 'node:http';
import { syncBuiltinESMExports } from 'node:module';
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

// http.request(options, callback): the options object gets the header, URL-string forms pass unchanged.
const requestOf = http.request;
http.request = (options, ...rest) =>
  options && typeof options === 'object' && !(options instanceof URL)
    ? requestOf({ ...options, headers: withAuthorization(options.headers) }, ...rest)
    : requestOf(options, ...rest);
syncBuiltinESMExports();
