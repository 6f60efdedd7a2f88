import { describe, expect, it } from "@jest/globals";
import { MultipleErrors, NetworkError, TimeoutError } from "@platformatic/kafka";
import { infrastructureUnavailable } from "../src/rpc/server.js";

// Which failures inside a service's handler mean "a dependency is unreachable" (answered Unavailable,
// a fast envelope 503 at the gateway) rather than a bug (Internal, a 500).

const named = (name: string) => Object.assign(new Error("x"), { name });
const coded = (message: string, code: string) => Object.assign(new Error(message), { code });

describe("infrastructure unavailable", () => {
  it("the drivers' connection errors, by name, also along the cause chain", () => {
    expect(infrastructureUnavailable(named("MongoNetworkError"))).toBe(true);
    expect(infrastructureUnavailable(named("MongoServerSelectionError"))).toBe(true);
    expect(infrastructureUnavailable(new NetworkError("Connection closed"))).toBe(true);
    expect(infrastructureUnavailable(new MultipleErrors("Producing messages failed.", [new TimeoutError("x")]))).toBe(
      true,
    );
    expect(infrastructureUnavailable(new Error("wrapped", { cause: named("MongoPoolClearedError") }))).toBe(true);
  });

  it("a bare socket error the MongoDB driver lets through when the server closed the connection under a write", () => {
    // What mongodb 6.22 threw with the database killed: Node's writeAfterFIN error, not a MongoNetworkError.
    expect(infrastructureUnavailable(coded("This socket has been ended by the other party", "EPIPE"))).toBe(true);
    expect(infrastructureUnavailable(coded("read ECONNRESET", "ECONNRESET"))).toBe(true);
    expect(
      infrastructureUnavailable(
        new Error("wrapped", { cause: coded("connect ECONNREFUSED 127.0.0.1:27017", "ECONNREFUSED") }),
      ),
    ).toBe(true);
  });

  it("anything else is not an outage", () => {
    expect(infrastructureUnavailable(new Error("boom"))).toBe(false);
    expect(infrastructureUnavailable(coded("bad argument", "ERR_INVALID_ARG_TYPE"))).toBe(false);
    expect(infrastructureUnavailable(named("MongoServerError"))).toBe(false); // a duplicate key, a bad query: the server answered
    expect(infrastructureUnavailable("EPIPE")).toBe(false);
  });
});
