import type { ValidateFunction } from "ajv";
export declare const crdDir: string;
export declare function crdFiles(): string[];
export declare function goRegExp(pattern: string, flags: string): RegExp;
export declare function crdValidators(): Map<string, ValidateFunction>;
export declare function validateCustomResource(obj: unknown): string[] | undefined;
export declare function strict(schema: unknown, path?: string): unknown;
