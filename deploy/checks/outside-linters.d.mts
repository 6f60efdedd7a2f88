import type { K8sObject } from "./chart.mjs";
export declare const TOOLS: Record<"kube-linter" | "kubeconform" | "pint", string>;
export declare const KUBE_VERSIONS: string[];
export declare const lintersDir: string;
export declare const productionValuesFile: string;
export declare function lintCache(env?: NodeJS.ProcessEnv): string;
export declare function ensureLinters(options?: { env?: NodeJS.ProcessEnv }): Record<string, string>;
export declare function kubernetesSchemas(kubeVersion: string, dir: string): string;
export declare function crdSchemas(dir: string): string;
export declare function kubeconform(
  binary: string,
  manifestFile: string,
  kubeVersion: string,
  options?: { cache?: string },
): {
  findings: string[];
  summary: { valid: number; invalid: number; errors: number; skipped: number };
  code: number | null;
};
export declare function kubeLinter(
  binary: string,
  manifestFile: string,
): { findings: string[]; checks: string[]; code: number | null };
export declare function pint(binary: string, docs: K8sObject[]): { findings: string[]; files: number; output?: string };
export declare function productionValues(): Record<string, unknown>;
export declare function exceptions(file: string, text?: string): { name: string; reason: string }[];
