// Parses ../asyncapi.yaml with the AsyncAPI project's parser (its schema validation and its Spectral
// rules), OpenAPI 3.0 payload schemas included, and prints one JSON object: the parser's diagnostics,
// every $ref left unresolved in the parsed document, and the channels' addresses and operations' ids
// the parser read. It exits 1 when the document did not parse; ./run runs it, and TestAsyncAPIParse in
// package api reads its output and fails on every error.
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { Parser, fromFile } from '@asyncapi/parser';
import { OpenAPISchemaParser } from '@asyncapi/openapi-schema-parser';

const file = path.resolve(path.dirname(fileURLToPath(import.meta.url)), process.argv[2] ?? '../asyncapi.yaml');
const parser = new Parser({ schemaParsers: [OpenAPISchemaParser()] });
const { document, diagnostics } = await fromFile(parser, file).parse();

// unresolved lists the JSON pointers of every $ref the parser left in the document.
function unresolved(v, at, out) {
  if (v === null || typeof v !== 'object') return out;
  for (const [k, x] of Object.entries(v)) {
    const p = `${at}/${k.replaceAll('~', '~0').replaceAll('/', '~1')}`;
    if (k === '$ref') out.push(`${p}: ${x}`);
    else unresolved(x, p, out);
  }
  return out;
}

const result = {
  parser: '@asyncapi/parser',
  diagnostics: diagnostics.map((d) => ({
    code: String(d.code), message: d.message, severity: d.severity, path: d.path.map(String),
    line: d.range.start.line + 1, character: d.range.start.character + 1,
  })),
  parsed: document !== undefined,
  unresolved: document ? unresolved(document.json(), '', []) : [],
  channels: document ? document.channels().all().map((c) => c.address()) : [],
  operations: document ? document.operations().all().map((o) => o.id()) : [],
};
process.stdout.write(JSON.stringify(result, null, 1) + '\n');
process.exitCode = document ? 0 : 1;
