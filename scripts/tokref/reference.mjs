// Encodes the conformance texts with every conformance tokenizer using
// Hugging Face's tokenizers.js (@huggingface/tokenizers, pinned in
// package.json), and writes each tokenizer's reference.json beside the
// texts. Run by reference.sh; see docs/tokenizer.md.
import { readFileSync, writeFileSync, existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";

const pkg = JSON.parse(readFileSync(new URL("./node_modules/@huggingface/tokenizers/package.json", import.meta.url)));
const base = process.argv[2]; // coordinator/gateway/tokenizer
const conf = join(base, "testdata", "conformance");
const texts = JSON.parse(readFileSync(join(conf, "texts.json"), "utf8"));
// name → the directory of its tokenizer.json (as conformance_gen_test.go has it)
const tokenizers = {
  gpt2: join(base, "testdata", "tokenizer"),
  llama3: join(conf, "llama3"),
  qwen2: join(conf, "qwen2"),
  llama2: join(conf, "llama2"),
  mistral: join(conf, "mistral"),
};

for (const [name, dir] of Object.entries(tokenizers)) {
  const json = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
  const cfgPath = join(dir, "tokenizer_config.json");
  const cfg = existsSync(cfgPath) ? JSON.parse(readFileSync(cfgPath, "utf8")) : {};
  const tok = new Tokenizer(json, cfg);
  const cases = texts.map((text) => {
    const ids = tok.encode(text, { add_special_tokens: false }).ids;
    const withSpecials = tok.encode(text, { add_special_tokens: true }).ids;
    // tokenizers.js refuses to decode no ids: their text is "".
    const decoded = ids.length ? tok.decode(ids, { skip_special_tokens: true, clean_up_tokenization_spaces: false }) : "";
    return { text, ids, ids_with_specials: withSpecials, decoded };
  });
  const out = { reference: `${pkg.name} ${pkg.version} (tokenizers.js)`, tokenizer: name, cases };
  mkdirSync(join(conf, name), { recursive: true });
  writeFileSync(join(conf, name, "reference.json"), JSON.stringify(out, null, 1) + "\n");
  console.log(`${name}: ${cases.length} texts`);
}
