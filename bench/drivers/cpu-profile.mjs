// Preloaded into every Node process of the stack when BENCH_CPU_PROF names a directory
// (NODE_OPTIONS="--import .../cpu-profile.mjs"; Node 20 refuses --cpu-prof there): profiles the
// whole life of the process with the inspector and writes <name>-<pid>.cpuprofile at exit.
import { Session } from "node:inspector";
import { writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";

const dir = process.env.BENCH_CPU_PROF;
if (dir) {
  const session = new Session();
  session.connect();
  session.post("Profiler.enable");
  session.post("Profiler.setSamplingInterval", { interval: 1000 });
  session.post("Profiler.start");
  const script = process.argv[1] ?? "node";
  const name = basename(script) === "main.js" ? basename(dirname(dirname(script))) : basename(script, ".js");
  process.on("exit", () => {
    // The in-process session answers synchronously, so the profile is written before the exit.
    session.post("Profiler.stop", (err, result) => {
      if (!err) writeFileSync(join(dir, `${name}-${process.pid}.cpuprofile`), JSON.stringify(result.profile));
    });
  });
}
