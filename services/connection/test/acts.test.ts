import { describe, expect, it } from "@jest/globals";
import { ACT_ID, rememberAct, REMEMBERED_ACTS } from "../src/acts.js";

describe("caregiver acts by id (a repeat of an applied act changes nothing)", () => {
  it("remembers the newest acts only, at most REMEMBERED_ACTS, oldest first", () => {
    let remembered = rememberAct(undefined, { id: "act_0", status: "approved" });
    expect(remembered).toEqual([{ id: "act_0", status: "approved" }]);
    for (let i = 1; i <= REMEMBERED_ACTS + 3; i++)
      remembered = rememberAct(remembered, { id: `act_${i}`, status: i % 2 ? "revoked" : "approved" });
    expect(remembered).toHaveLength(REMEMBERED_ACTS);
    expect(remembered[0]!.id).toBe("act_4");
    expect(remembered.at(-1)).toEqual({ id: `act_${REMEMBERED_ACTS + 3}`, status: "revoked" });
    expect(remembered.some((a) => a.id === "act_3")).toBe(false);
  });

  it("accepts act ids of newId's shape and refuses anything else", () => {
    expect(ACT_ID.test("act_4Fz09aBcDeFgHiJkLmNoPq")).toBe(true);
    for (const bad of ["", "act_", "con_abc", "act_a-b", `act_${"a".repeat(65)}`, "act_abc\n"])
      expect(ACT_ID.test(bad)).toBe(false);
  });
});
