/** Every quorumq.v1 field of an encoded FileDescriptorSet ("Message.field", camelCase) -> its tag. */
export declare function descriptorTags(descriptorSet: Uint8Array): Map<string, number>;
/** The disagreements of `handTags` ({ Message: { field: tag } }) with the descriptors; empty when none. */
export declare function tagProblems(
  handTags: Readonly<Record<string, Readonly<Record<string, number>>>>,
  descriptorSet: Uint8Array,
  varintTagged?: ReadonlySet<string>,
): string[];
