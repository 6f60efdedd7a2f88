// The test lanes: which lane each test file belongs to, by folder and file name, in one place.
// jest.config.js makes one jest project of each lane; deploy/local/bootstrap.mjs runs one lane
// (`npm run test:<lane>`) or all of them in one jest run (`npm test`); a unit test checks that every
// test file in the repository belongs to exactly one lane.
//
//   unit         <package>/test/**/*.test.ts        pure and in-process: no database, no Kafka, no
//                                                   connection to anything this process did not open
//   integration  <package>/test/**/*.integration.test.ts
//                                                   a service's parts on the real MongoDB-wire server
//                                                   and Kafka, child processes, a browser
//   e2e          test/e2e/**, test/blackbox/**      the whole stack through the gateway, or npm start
//   deploy       test/deploy/**                     the Helm chart and the container image
//   cluster      test/cluster/**                    an installed release on a Kubernetes cluster; not in
//                                                   `npm test`: `npm run test:cluster` (deploy/cluster) only
//
// <package> is proto, services/<name>, deploy/<name> or sdk/<name>. Patterns are matched against paths
// relative to the repository root, with forward slashes.

const PACKAGE_TEST = "(?:proto|services/[^/]+|deploy/[^/]+|sdk/[^/]+)/test/";

/** @type {Record<string, { patterns: RegExp[]; infra: boolean; build: boolean; ownRun?: boolean; about: string }>} */
export const LANES = {
  unit: {
    patterns: [
      new RegExp(String.raw`^${PACKAGE_TEST}(?!.*\.integration\.test\.ts$).+\.test\.ts$`),
      /^test\/support\/.+\.test\.ts$/,
    ],
    infra: false,
    build: false,
    about: "pure and in-process: no database, no Kafka, no server of another process",
  },
  integration: {
    patterns: [new RegExp(String.raw`^${PACKAGE_TEST}.+\.integration\.test\.ts$`)],
    infra: true,
    build: true,
    about: "a service's parts on the real MongoDB-wire server and Kafka",
  },
  e2e: {
    patterns: [/^test\/(?:e2e|blackbox)\/.+\.test\.ts$/],
    infra: true,
    build: true,
    about: "the whole stack through the gateway, or npm start",
  },
  deploy: {
    patterns: [/^test\/deploy\/.+\.test\.ts$/],
    infra: true,
    build: true,
    about: "the Helm chart and the container image",
  },
  cluster: {
    patterns: [/^test\/cluster\/.+\.test\.ts$/],
    infra: false,
    build: true,
    ownRun: true,
    about: "an installed release on a Kubernetes cluster (npm run test:cluster)",
  },
};

/** The lanes a repository-relative path belongs to (exactly one for every test file). */
export function lanesOf(relativePath) {
  return Object.keys(LANES).filter((lane) => LANES[lane].patterns.some((p) => p.test(relativePath)));
}

/** jest `testRegex` entries of a lane: its patterns anchored at the repository root. */
export function testRegexOf(lane, rootDir) {
  const root = rootDir.replace(/[.*+?^${}()|[\]\\]/g, "\\$&").replace(/\/?$/, "/");
  return LANES[lane].patterns.map((p) => `^${root}${p.source.replace(/^\^/, "")}`);
}
