// The order in which `npm test` starts its files. jest's own sequencer starts the files that failed
// last time, then the files whose durations it cached, slowest first, then the others by size. A
// clean clone has no durations (jest keys them by the checkout's path), and by size a 40-line file that
// builds a container image started last, after the unit lane, and whole-stack files only minutes into
// the run. So the files without a duration go by lane: the whole-stack and deploy files, which
// take minutes, start first, and the unit files fill the gaps at the end.
import TestSequencer from "@jest/test-sequencer";
import { relative, sep } from "node:path";
import { lanesOf } from "../lanes.mjs";

/** Lanes whose files take longest, first. */
const LANE_ORDER = ["e2e", "deploy", "integration", "unit"];

function laneRank(relativePath) {
  const rank = LANE_ORDER.indexOf(lanesOf(relativePath)[0]);
  return rank === -1 ? LANE_ORDER.length : rank;
}

export default class LaneFirstSequencer extends TestSequencer {
  sort(tests) {
    const sorted = super.sort(tests);
    const unknown = (t) => t.duration == null && !this.hasFailed(t);
    const rank = (t) => laneRank(relative(t.context.config.rootDir, t.path).split(sep).join("/"));
    // jest's order (by size) is kept within a lane: Array.prototype.sort is stable.
    const byLane = sorted.filter(unknown).sort((a, b) => rank(a) - rank(b));
    let next = 0;
    return sorted.map((t) => (unknown(t) ? byLane[next++] : t));
  }
}
