import { describe, expect, it } from "@jest/globals";
import { eachOnItsOwn } from "../src/token-batch.js";

// IssueTokens answers every request of a call on its own (token-batch.ts).

const outage = () => Object.assign(new Error("connection closed"), { name: "MongoNetworkError" });

describe("the requests of an IssueTokens call, each on its own", () => {
  it("answers in the order of the requests, whatever order they finish in", async () => {
    const delays = [30, 0, 10];
    const answers = await eachOnItsOwn(
      [0, 1, 2],
      (n) => new Promise<string>((r) => setTimeout(() => r(`token ${n}`), delays[n])),
      "unavailable",
    );
    expect(answers).toEqual(["token 0", "token 1", "token 2"]);
  });

  it("a request whose store is unreachable gets the unavailable answer; the others of the call are answered", async () => {
    const answers = await eachOnItsOwn(
      ["cached", "needs a read", "cached too"],
      async (r) => {
        if (r === "needs a read") throw outage();
        return `token for ${r}`;
      },
      "unavailable",
    );
    expect(answers).toEqual(["token for cached", "unavailable", "token for cached too"]);
  });

  it("any other failure is the service's fault and fails the call", async () => {
    await expect(
      eachOnItsOwn(
        [1, 2],
        async (n) => {
          if (n === 2) throw new TypeError("a bug");
          return n;
        },
        0,
      ),
    ).rejects.toThrow("a bug");
  });
});
