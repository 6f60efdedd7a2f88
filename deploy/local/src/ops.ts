import { stateDir } from "./paths.js";
import { withLocalStackAddresses, withLocalStackIdentity } from "./state-files.js";

// `npm run ops`: the operator CLI against the running `npm start`. Unset service addresses come from
// its STATE_DIR (it takes free ports), and so does the CLI's own service identity (the key of `ops`).
const dir = stateDir();
Object.assign(process.env, withLocalStackIdentity(withLocalStackAddresses(process.env, dir), dir, "ops"));
await import(new URL("../../../services/ops/dist/main.js", import.meta.url).href);
