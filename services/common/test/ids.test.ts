import { expect, it } from "@jest/globals";
import { newId } from "../src/rules/ids.js";

it("ids drawn across many refills of the random pool are well-formed and never repeat", () => {
  const ids = Array.from({ length: 2_000 }, () => newId("req"));
  for (const id of ids) expect(id).toMatch(/^req_[0-9A-Za-z]{22}$/);
  expect(new Set(ids).size).toBe(ids.length);
  // Every position takes many values: no byte of the pool is used twice for the same position.
  for (let i = 4; i < 26; i++) expect(new Set(ids.map((id) => id[i])).size).toBeGreaterThan(40);
});
