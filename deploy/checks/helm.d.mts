export declare const HELM_VERSION: string;
export declare const repoRoot: string;
export declare function cacheDir(env?: NodeJS.ProcessEnv): string;
/** Path of a helm binary of HELM_VERSION, built once with `go install` when missing. */
export declare function ensureHelm(options?: { env?: NodeJS.ProcessEnv; progress?: (line: string) => void }): string;
