import { infrastructureUnavailable } from "@pi/common/rpc/server";

/** A request whose store is unreachable gets `unavailable` (a 503 for it alone); any other failure fails the call. */
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
