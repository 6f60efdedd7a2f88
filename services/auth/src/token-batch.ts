import { infrastructureUnavailable } from "@pi/common/rpc/server";

/**
 * Runs `issue` for every request of an IssueTokens call: one whose store could not be reached gets
 * `unavailable` (a 503 for it alone) while the others are answered; any other failure fails the call.
 */
export function eachOnItsOwn<I, O>(requests: I[], issue: (request: I) => Promise<O>, unavailable: O): Promise<O[]> {
  return Promise.all(
    requests.map((request) =>
      issue(request).catch((err: unknown) => {
        if (!infrastructureUnavailable(err)) throw err;
        return unavailable;
      }),
    ),
  );
}
