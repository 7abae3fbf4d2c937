// M-AUTH: the official MCP TypeScript SDK's client following the MCP authorization discovery on its own:
// the 401's WWW-Authenticate -> Protected Resource Metadata -> the authorization server's metadata -> a token
// (client credentials, with the RFC 8707 resource) -> the tool call. Prints one JSON object: the HTTP
// transcript (method, URL, status, WWW-Authenticate; never a token) and the tool's result.
//   node oauth_client.mjs <mcp url> <client id> <client secret> <scope> <issuer> <query>
// A client-credentials client is registered with its scope and its authorization server (the SDK sends the
// provider's scope, and credentials only to the `expectedIssuer`); everything else it discovers.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';

const [url, clientId, clientSecret, scope, expectedIssuer, query] = process.argv.slice(2);
const transcript = [];

async function recordingFetch(input, init) {
  const response = await fetch(input, init);
  const target = typeof input === 'string' ? input : input.url ?? String(input);
  const entry = { method: init?.method ?? 'GET', url: target, status: response.status };
  const challenge = response.headers.get('www-authenticate');
  if (challenge) entry.www_authenticate = challenge;
  const body = init?.body;
  if (typeof body === 'string' && body.includes('grant_type')) {
    // The token request's parameters, the secret and any token left out.
    const params = new URLSearchParams(body);
    entry.token_request = Object.fromEntries([...params].filter(([k]) => !/secret|assertion/.test(k)));
  } else if (body instanceof URLSearchParams) {
    entry.token_request = Object.fromEntries([...body].filter(([k]) => !/secret|assertion/.test(k)));
  }
  if (target.includes('/.well-known/') && response.ok) {
    entry.document = await response.clone().json();
  }
  transcript.push(entry);
  return response;
}

const authProvider = new ClientCredentialsProvider({ clientId, clientSecret, scope, expectedIssuer });
const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider, fetch: recordingFetch });
const client = new Client({ name: 'kb-oauth-e2e', version: '1.0.0' });
let result;
try {
  await client.connect(transport);
  const tools = await client.listTools();
  const call = await client.callTool({ name: 'knowledge_search', arguments: { query } });
  result = { tools: tools.tools.map((t) => t.name), call };
  const tokens = authProvider.tokens();
  result.token_scope = tokens?.scope ?? null;
} catch (error) {
  result = { error: String(error?.message ?? error) };
} finally {
  await client.close().catch(() => {});
}
process.stdout.write(JSON.stringify({ transcript, ...result }) + '\n');
