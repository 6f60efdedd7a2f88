// Kubernetes objects are handled as plain parsed YAML.
// biome-ignore lint/suspicious/noExplicitAny: Kubernetes objects are plain parsed YAML, read field by field
export type K8sObject = any;
export type Combination = Record<
  "ingress" | "networkPolicy" | "pdb" | "hpa" | "externalMongo" | "externalKafka" | "metrics" | "httpRoute",
  boolean
>;
export interface ServiceInfo {
  key: string;
  component: string;
  data: boolean;
}
export declare const chartDir: string;
export declare const RELEASE: string;
export declare const NAMESPACE: string;
export declare const KUBE_VERSION: string;
export declare const SERVICES: ServiceInfo[];
export declare const SWITCHES: Record<keyof Combination, (on: boolean) => Record<string, unknown>>;
export declare const LOCAL_ONLY_SETTINGS: string[];
export declare const SECRET_SETTINGS: Record<string, string[]>;
export declare const THROWAWAY: Record<string, unknown>;
export declare const NO_HOST_NEEDED: Record<string, unknown>;
export declare function valuesFor(combination: Partial<Combination>): Record<string, unknown>;
export declare function allCombinations(): Combination[];
export declare function describeCombination(c: Partial<Combination>): string;
export declare function helmLint(helm: string, values?: unknown): { code: number | null; output: string };
export declare function helmTemplate(
  helm: string,
  values?: unknown,
  options?: { release?: string; namespace?: string; extraArgs?: string[] },
): { code: number | null; stderr: string; docs: K8sObject[]; text: string };
export declare function renderNotes(
  helm: string,
  values?: unknown,
  options?: { release?: string; namespace?: string },
): string;
export declare function validateSchemas(docs: K8sObject[]): Promise<string[]>;
export declare function workloads(docs: K8sObject[]): K8sObject[];
export declare function byKind(docs: K8sObject[], kind: string): K8sObject[];
export declare function find(docs: K8sObject[], kind: string, name: string): K8sObject | undefined;
export declare function checkHardening(docs: K8sObject[]): string[];
export declare function checkReferences(docs: K8sObject[], options?: { externalSecrets?: string[] }): string[];
export declare function serviceSettings(): string[];
export declare function contractSettings(): string[] | undefined;
export declare function envOf(container: K8sObject): Record<string, unknown>;
export declare function checkSettingsWired(docs: K8sObject[], options?: { release?: string }): string[];
export declare function skaffoldConfig(): K8sObject;
export declare function checkSkaffoldImages(docs: K8sObject[], options?: { release?: string }): string[];
export declare function checkDockerfileWorkspaces(): string[];
