// Validates a PGXN META.json against test/pgxn/meta-spec-1.0.schema.json
// with ajv (JSON Schema 2020-12). Usage: node pgxn_meta_check.js META.json
// Prints "valid", or each error as "<path> <message>" with exit status 1.
'use strict';
const fs = require('fs');
const path = require('path');
const Ajv2020 = require('ajv/dist/2020');
const addFormats = require('ajv-formats');

const schema = JSON.parse(fs.readFileSync(path.join(__dirname, 'pgxn', 'meta-spec-1.0.schema.json'), 'utf8'));
const meta = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const ajv = new Ajv2020({ allErrors: true, strict: true, strictRequired: false });
addFormats(ajv);
const validate = ajv.compile(schema);
if (validate(meta)) {
  console.log('valid');
} else {
  for (const e of validate.errors) console.log(`${e.instancePath || '/'} ${e.message}`);
  process.exit(1);
}
