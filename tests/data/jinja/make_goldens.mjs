// tests/data/jinja/make_goldens.mjs DIR [OUTDIR] - renders each family's
// template (DIR/<family>.jinja, families.txt: name, bos_token, eos_token,
// "-" for none) on each conversation of conversations.jsonl with
// @huggingface/jinja (the renderer transformers.js uses) and writes
// OUTDIR/<family>.golden: one JSON line per conversation, the rendered
// string, or {"error": message} when the template raised.
// Usage: npm install @huggingface/jinja, then node make_goldens.mjs .
import fs from "fs";
import path from "path";
import { createRequire } from "module";

const [dir, outDir = dir] = process.argv.slice(2);
const require = createRequire(path.resolve("package.json"));
const { Template } = await import(require.resolve("@huggingface/jinja"));
const convs = fs.readFileSync(path.join(dir, "conversations.jsonl"), "utf8")
    .split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
for (const line of fs.readFileSync(path.join(dir, "families.txt"), "utf8").split("\n")) {
    if (line.length === 0) continue;
    const [name, bos, eos] = line.split(" ");
    const tpl = new Template(fs.readFileSync(path.join(dir, name + ".jinja"), "utf8"));
    const out = convs.map((c) => {
        const vars = { ...c, bos_token: bos === "-" ? null : bos, eos_token: eos === "-" ? null : eos };
        try {
            return JSON.stringify(tpl.render(vars));
        } catch (e) {
            return JSON.stringify({ error: String(e.message) });
        }
    });
    fs.writeFileSync(path.join(outDir, name + ".golden"), out.join("\n") + "\n");
}
