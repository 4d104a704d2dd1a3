export declare function varintBytes(value: number): number;
export declare function writeVarint(buf: Buffer, at: number, value: number): number;
export declare function stringFieldBytes(text: string | null | undefined): number;
export declare function writeStringField(buf: Buffer, at: number, tag: number, text: string | null | undefined): number;
export declare function bytesFieldBytes(length: number): number;
export declare function writeBytesField(buf: Buffer, at: number, tag: number, bytes: Uint8Array): number;
export declare function varintFieldBytes(value: number | null | undefined): number;
export declare function writeVarintField(buf: Buffer, at: number, tag: number, value: number | null | undefined): number;
