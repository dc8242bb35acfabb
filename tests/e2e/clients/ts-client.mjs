// node ts-client.mjs URL MODE TOOL ARGS_JSON URI PROMPT
//
// The official TypeScript SDK client (@modelcontextprotocol/client, pinned in
// tests/package.json) connected in one of its version-negotiation modes:
//   legacy      versionNegotiation.mode 'legacy' (the plain 2025 initialize)
//   auto        mode 'auto' (probe server/discover, fall back to initialize)
//   pin:VER     mode { pin: VER } (modern only, no fallback)
// then tools/list, tools/call TOOL with the JSON object ARGS_JSON, resources/read
// URI and prompts/get PROMPT. Prints one JSON object on stdout: the summary
// (exit 0) or {"stage", "error"} (exit 1). Usage errors exit 2.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const OVERALL_MS = 30_000;

function negotiation(mode) {
  if (mode === 'legacy' || mode === 'auto') return { mode };
  if (mode.startsWith('pin:')) return { mode: { pin: mode.slice(4) } };
  return undefined;
}

const [url, mode, tool, argsJson, uri, prompt] = process.argv.slice(2);
const versionNegotiation = mode === undefined ? undefined : negotiation(mode);
let args;
try {
  args = JSON.parse(argsJson ?? '');
} catch {
  args = undefined;
}
if (!prompt || !versionNegotiation || typeof args !== 'object' || args === null || Array.isArray(args)) {
  console.error('usage: ts-client.mjs URL legacy|auto|pin:VERSION TOOL ARGS_JSON URI PROMPT');
  process.exit(2);
}

let stage = 'connect';
const timer = setTimeout(() => {
  console.log(JSON.stringify({ mode, stage, error: `timed out after ${OVERALL_MS} ms` }));
  process.exit(1);
}, OVERALL_MS);

const client = new Client({ name: 'mcpgate-era-matrix', version: '0.0.0' }, { versionNegotiation });
try {
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const summary = {
    mode,
    era: client.getProtocolEra(),
    protocolVersion: client.getNegotiatedProtocolVersion(),
    server: client.getServerVersion()?.name,
  };
  stage = 'tools/list';
  const tools = [];
  let cursor;
  do {
    const page = await client.listTools(cursor ? { cursor } : undefined);
    tools.push(...page.tools.map((t) => t.name));
    cursor = page.nextCursor;
  } while (cursor);
  summary.tools = tools;
  stage = 'tools/call';
  summary.call = await client.callTool({ name: tool, arguments: args });
  stage = 'resources/read';
  summary.read = await client.readResource({ uri });
  stage = 'prompts/get';
  summary.prompt = await client.getPrompt({ name: prompt });
  stage = 'close';
  await client.close();
  clearTimeout(timer);
  console.log(JSON.stringify(summary));
  process.exit(0);
} catch (e) {
  clearTimeout(timer);
  const error = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
  console.log(JSON.stringify({ mode, stage, error, code: e?.code }));
  process.exit(1);
}
