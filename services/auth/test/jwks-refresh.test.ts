import { describe, expect, it } from "@jest/globals";
import {
  JWKS_URL_MAX_AGE_MS,
  JWKS_URL_REFETCH_COOLDOWN_MS,
  scheduledFetchDue,
  unknownKidFetchDue,
  type FetchHistory,
} from "../src/jwks-refresh.js";

// When a JWK Set URL is fetched: in the background only, on a schedule and for an unknown kid,
// never twice within the cooldown, and a failure remembered like a success.

const times = { maxAgeMs: JWKS_URL_MAX_AGE_MS, cooldownMs: JWKS_URL_REFETCH_COOLDOWN_MS };
const now = new Date("2026-11-28T12:00:00Z");
const ago = (ms: number) => new Date(now.getTime() - ms);
const S = 1000;

describe("JWK Set URL fetches", () => {
  it.each<[string, FetchHistory, boolean, boolean]>([
    // what, history, scheduled round fetches, an unknown kid fetches
    ["never fetched (a credential stored by an older release)", {}, true, true],
    ["fetched 10 s ago", { fetchedAt: ago(10 * S) }, false, false],
    ["fetched 31 s ago", { fetchedAt: ago(31 * S) }, false, true],
    ["fetched 11 minutes ago", { fetchedAt: ago(11 * 60 * S) }, true, true],
    [
      "failed 10 s ago, set 11 minutes old: the failure is remembered",
      { fetchedAt: ago(11 * 60 * S), failedAt: ago(10 * S) },
      false,
      false,
    ],
    ["failed 31 s ago, set 11 minutes old", { fetchedAt: ago(11 * 60 * S), failedAt: ago(31 * S) }, true, true],
    ["never fetched, failed 5 s ago (another replica)", { failedAt: ago(5 * S) }, false, false],
    [
      "this replica tried 5 s ago (in flight or not stored yet)",
      { fetchedAt: ago(11 * 60 * S), attemptedAt: ago(5 * S) },
      false,
      false,
    ],
    ["this replica tried 40 s ago", { fetchedAt: ago(5 * 60 * S), attemptedAt: ago(40 * S) }, false, true],
  ])("%s", (_what, history, scheduled, unknownKid) => {
    expect({
      scheduled: scheduledFetchDue(history, now, times),
      unknownKid: unknownKidFetchDue(history, now, times),
    }).toEqual({ scheduled, unknownKid });
  });
});
