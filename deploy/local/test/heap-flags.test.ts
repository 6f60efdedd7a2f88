import { describe, expect, it } from "@jest/globals";
import { heapFlagsOfDockerfile } from "../../checks/image-check.mjs";
import { NODE_HEAP_FLAGS } from "../src/stack.js";

describe("the V8 heap flags of every service process", () => {
  it("are the same under npm start as in the image (deploy/Dockerfile's NODE_HEAP_FLAGS)", () => {
    expect(NODE_HEAP_FLAGS).toEqual(heapFlagsOfDockerfile());
    expect(() => heapFlagsOfDockerfile('CMD ["node"]')).toThrow("NODE_HEAP_FLAGS");
  });
});
