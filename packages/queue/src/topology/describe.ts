/**
 * A bad value as an error message shows it. Commands come decoded from the metadata log,
 * where JSON may carry tagged bigints: JSON.stringify would throw on those, and an error
 * message must never make a command's apply throw.
 */
export function describeValue(value: unknown): string {
  if (typeof value === 'bigint') return `${value}n`;
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return Array.isArray(value) ? 'an array' : typeof value;
  }
}
