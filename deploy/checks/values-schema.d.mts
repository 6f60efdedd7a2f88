export declare const schemaFile: string;
export declare const schema: Record<string, unknown>;
export declare function schemaText(): string;
