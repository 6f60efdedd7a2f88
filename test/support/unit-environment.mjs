// The unit lane's jest environment: every lane's (node-environment.mjs), plus a guard that a unit
// test reaches no server it did not start itself. While a unit test file runs, a TCP connection is
// refused unless it goes to a loopback port that a server of this same file listened on (the
// gateway app on its own socket, a receiver standing in for a partner); a connection to the
// MongoDB-wire server, Kafka, a service or the Internet throws, and the test it happened in fails
// even if the code under test swallowed the error. The guard belongs to the file being run: an
// integration test that a worker runs next is not affected.
import net from "node:net";
import NodeEnvironment from "./node-environment.mjs";

const GUARD = Symbol.for("pi.unit-lane.guard");
const LOOPBACK = new Set([undefined, null, "", "localhost", "127.0.0.1", "::1", "::ffff:127.0.0.1"]);

/** Where a Socket#connect call goes: its (port, host) or its IPC path. */
function targetOf(args) {
  let first = args[0];
  // net.connect() hands Socket#connect its arguments already normalised, as [options, callback].
  if (Array.isArray(first)) first = first[0];
  // An options object (http's carry path: null) is an IPC connection only with a path.
  if (first !== null && typeof first === "object")
    return first.path ? { path: first.path } : { port: Number(first.port), host: first.host };
  if (typeof first === "string" && !/^\d+$/.test(first)) return { path: first };
  return { port: Number(first), host: typeof args[1] === "string" ? args[1] : undefined };
}

/**
 * Patches net once per process and keeps the guard of the unit test file running now on net itself
 * (jest may load this module more than once); with no guard set (an integration test in the same
 * worker) everything passes through.
 */
function shared() {
  if (net[GUARD]) return net[GUARD];
  const state = { current: null };
  net[GUARD] = state;
  const listen = net.Server.prototype.listen;
  const connect = net.Socket.prototype.connect;
  net.Server.prototype.listen = function guardedListen(...args) {
    const guard = state.current;
    if (guard) {
      this.once("listening", () => {
        const address = this.address();
        if (address && typeof address === "object") guard.ownPorts.add(address.port);
      });
    }
    return listen.apply(this, args);
  };
  net.Socket.prototype.connect = function guardedConnect(...args) {
    const guard = state.current;
    if (!guard) return connect.apply(this, args);
    const target = targetOf(args);
    const refuse = (where) => {
      const error = new Error(
        `unit lane: a connection to ${where}, which this test file did not open. A unit test reaches no database, ` +
          "Kafka or other server; a test that needs one is an integration test (name it *.integration.test.ts, see test/lanes.mjs).",
      );
      guard.violations.push(error);
      return error;
    };
    const own = (address) => guard.ownPorts.has(target.port) && LOOPBACK.has(address);
    if (target.path !== undefined) throw refuse(target.path);
    if (LOOPBACK.has(target.host) || net.isIP(target.host)) {
      if (!own(target.host)) throw refuse(`${target.host ?? "localhost"}:${target.port}`);
    } else {
      // A name: judged by the address it resolves to, after the lookup the code under test chose
      // (which may refuse it first) and before the socket connects.
      this.once("lookup", (err, address) => {
        if (!err && !own(address)) this.destroy(refuse(`${target.host} (${address}):${target.port}`));
      });
    }
    return connect.apply(this, args);
  };
  return state;
}

export default class UnitLaneEnvironment extends NodeEnvironment {
  guard = { ownPorts: new Set(), violations: [] };

  async setup() {
    await super.setup();
    // A unit test is handed no database or Kafka address, even in `npm test`, where other lanes'
    // globalSetup started them (the test file sees its own copy of the environment).
    delete this.global.process.env.TEST_MONGODB_URI;
    delete this.global.process.env.TEST_KAFKA_BROKERS;
    shared().current = this.guard;
    // For the lane's own test, which checks that the guard bites.
    this.global[GUARD] = this.guard;
  }

  async teardown() {
    const state = shared();
    if (state.current === this.guard) state.current = null;
    await super.teardown();
  }

  /** A connection the code under test caught and hid still fails the test it happened in. */
  async handleTestEvent(event) {
    if (event.name === "test_done" && this.guard.violations.length > 0) {
      event.test.errors.push(...this.guard.violations.splice(0));
    }
  }
}
