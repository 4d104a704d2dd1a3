/** A human table: one header row, columns padded to their widest cell; "(none)" when empty. */
export function formatTable(rows: ReadonlyArray<Record<string, unknown>>): string {
  if (rows.length === 0) return '(none)\n';
  const columns = Object.keys(rows[0]!);
  const cell = (value: unknown): string => (value === true ? 'yes' : value === false ? 'no' : value === null || value === undefined ? '' : String(value));
  const cells = rows.map((row) => columns.map((column) => cell(row[column])));
  const widths = columns.map((column, i) => Math.max(column.length, ...cells.map((r) => r[i]!.length)));
  const line = (values: readonly string[]): string => values.map((v, i) => v.padEnd(widths[i]!)).join('  ').trimEnd();
  return `${[line(columns.map((c) => c.toUpperCase())), ...cells.map(line)].join('\n')}\n`;
}
