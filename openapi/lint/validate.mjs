// Parses, dereferences and validates the spec against the OpenAPI schema (the third check of
// scripts/lint-openapi.sh).
import SwaggerParser from "@apidevtools/swagger-parser";

const file = process.argv[2] ?? "../openapi.json";
try {
  const api = await SwaggerParser.validate(file);
  const ops = Object.values(api.paths).flatMap((item) => Object.keys(item)).length;
  console.log(`swagger-parser: ${file} is valid OpenAPI ${api.openapi} (${ops} operations)`);
} catch (err) {
  console.error(`swagger-parser: ${file} is not valid: ${err.message}`);
  process.exit(1);
}
