import { checkDecodedSize } from "./dist/decoded-size.js";
import { readFileSync } from "node:fs";
for (const f of process.argv.slice(2)) { try { const b = readFileSync(f); const w={bytes:0}; const t=performance.now(); const r = await checkDecodedSize(b, 256<<20, 8<<20, w); console.log(f, b.length, r, w.bytes, Math.round(performance.now()-t),"ms"); } catch (e) { console.log(f, "ERR", e.message); } }
