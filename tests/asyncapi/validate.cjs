// Parses and validates an AsyncAPI document with the official parser (@asyncapi/parser),
// resolving its relative $refs from the document's directory, and prints one JSON line:
// {"errors": [...], "warnings": [...], "channels": {...}, "operations": [...]} where the
// last two come from the parsed model, so the caller can check what the parser understood.
//
// usage: node validate.cjs NODE_MODULES_PARENT_DIR DOCUMENT
'use strict';
const fs = require('fs');
const path = require('path');

async function main() {
  const [dir, file] = process.argv.slice(2);
  if (!dir || !file) {
    console.error('usage: node validate.cjs NODE_MODULES_PARENT_DIR DOCUMENT');
    process.exit(2);
  }
  const { Parser, fromFile } = require(require.resolve('@asyncapi/parser', { paths: [dir] }));
  const parser = new Parser();
  const { document, diagnostics } = await fromFile(parser, path.resolve(file)).parse();
  const describe = (d) => ({ path: d.path.join('/'), message: d.message, code: d.code });
  // Spectral severities: 0 error, 1 warning, 2 information, 3 hint.
  const out = {
    errors: diagnostics.filter((d) => d.severity === 0).map(describe),
    warnings: diagnostics.filter((d) => d.severity === 1).map(describe),
    channels: {},
    operations: [],
  };
  if (document) {
    for (const channel of document.channels()) {
      out.channels[channel.id()] = {
        address: channel.address(),
        messages: channel.messages().all().map((m) => ({
          name: m.name(),
          contentType: m.contentType(),
          headers: m.hasHeaders() ? Object.keys(m.headers().properties() || {}).sort() : [],
          payloadSchemas: m.hasPayload() ? m.payload().oneOf()?.map((s) => s.id()) ?? [] : [],
        })),
      };
    }
    out.operations = document.operations().all().map((o) => ({
      id: o.id(),
      action: o.action(),
      channels: o.channels().all().map((c) => c.id()),
    }));
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((e) => {
  console.error(`validate.cjs: ${e.stack || e}`);
  process.exit(1);
});
