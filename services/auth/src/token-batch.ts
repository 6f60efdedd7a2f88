import { infrastructureUnavailable } from "@pi/common/rpc/server";

/**
 * Runs `issue` for every request of an IssueTokens call, each on its own: a request whose store
 * could not be reached gets `unavailable` (a 503 for that partner request alone) while the others
 * are answered, as they would have been one call each (a cached authentication needs no read).
 * Any other failure is a fault of the service and fails the call.
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
