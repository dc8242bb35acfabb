// A real OAuth 2.0 / OpenID Connect authorization server for mcpgate's e2e tests:
// the certified `oidc-provider` package (pinned in tests/package-lock.json) with the
// client-credentials grant and RFC 8707 resource indicators, issuing RS256 JWT access
// tokens whose `aud` is the requested resource (the gateway's MCP endpoint URL).
//
//   node tests/oidc/provider.mjs PORT [CLIENTS_JSON]
//
// PORT: loopback port to listen on; the issuer is http://127.0.0.1:PORT.
// CLIENTS_JSON: [{"client_id", "client_secret", "scope"}, ...] — each a confidential
// client allowed the client_credentials grant for the listed scopes
// (client_secret_basic or client_secret_post). Default: one client "mcp-host".
// Prints "READY <issuer>" on stdout once listening; stops on SIGTERM/SIGINT.
// Test use only: http on loopback, keys generated at start, in-memory storage.

import { generateKeyPairSync, randomUUID } from 'node:crypto';
import Provider from 'oidc-provider';

const port = Number(process.argv[2] || 0);
if (!port) {
  console.error('usage: node tests/oidc/provider.mjs PORT [CLIENTS_JSON]');
  process.exit(2);
}
const clients = JSON.parse(
  process.argv[3] || '[{"client_id":"mcp-host","client_secret":"mcp-host-secret","scope":"mcp:tools"}]',
);
const issuer = `http://127.0.0.1:${port}`;

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const jwk = { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg: 'RS256', use: 'sig' };

const allScopes = [...new Set(clients.flatMap((c) => c.scope.split(' ')))];

const provider = new Provider(issuer, {
  clients: clients.map((c) => ({
    client_id: c.client_id,
    client_secret: c.client_secret,
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    scope: c.scope,
    token_endpoint_auth_method: c.token_endpoint_auth_method || 'client_secret_basic',
  })),
  jwks: { keys: [jwk] },
  scopes: ['openid', ...allScopes],
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    introspection: { enabled: true },
    resourceIndicators: {
      enabled: true,
      // Every absolute http(s) resource is a resource server here; its tokens are JWTs
      // for exactly that audience with the scopes the client may have.
      getResourceServerInfo: (ctx, resourceIndicator) => ({
        scope: allScopes.join(' '),
        audience: resourceIndicator,
        accessTokenTTL: 600,
        accessTokenFormat: 'jwt',
        jwt: { sign: { alg: 'RS256' } },
      }),
      useGrantedResource: () => true,
    },
  },
});

const server = provider.listen(port, '127.0.0.1', () => {
  console.log(`READY ${issuer}`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
