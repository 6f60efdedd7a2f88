// Preloaded into every Node process of the stack when BENCH_CPU_PROF names a directory
// (NODE_OPTIONS="--import .../cpu-profile.mjs"; Node 20 refuses --cpu-prof there): profiles the
// whole life of the process with the inspector and writes <name>-<pid>.cpuprofile when it is told
// to stop (SIGTERM, SIGINT) or exits.
import { Session } from "node:inspector";
import { writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";

const dir = process.env.BENCH_CPU_PROF;
if (dir) {
  const session = new Session();
  session.connect();
  session.post("Profiler.enable");
  session.post("Profiler.setSamplingInterval", { interval: Number(process.env.BENCH_CPU_PROF_INTERVAL_US ?? 1000) });
  session.post("Profiler.start");
  const script = process.argv[1] ?? "node";
  const name = basename(script) === "main.js" ? basename(dirname(dirname(script))) : basename(script, ".js");
  let written = false;
  const write = () => {
    if (written) return;
    written = true;
    // The in-process session answers synchronously, so the profile is on disk when this returns.
    session.post("Profiler.stop", (err, result) => {
      if (!err) writeFileSync(join(dir, `${name}-${process.pid}.cpuprofile`), JSON.stringify(result.profile));
    });
  };
  // On the stop signal already: a process that is slow to exit may be killed before its exit.
  for (const signal of ["SIGTERM", "SIGINT"]) process.prependListener(signal, write);
  process.on("exit", write);
}
