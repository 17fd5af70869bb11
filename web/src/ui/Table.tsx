// A list shown as a table: its loading state, its error, its empty text,
// and one row per item with the columns given. On a phone each row is a
// card, each cell under its column's name (a hidden head names none).
import type { ComponentChildren } from "preact";
import { Loading, Problem } from "./Problem";

export type Column<T> = { head: string; wide?: boolean; hidden?: boolean; cell: (row: T) => ComponentChildren };

export function Table<T>(props: {
  what: string;
  rows?: T[];
  loading?: boolean;
  error?: Error;
  empty: ComponentChildren;
  columns: Column<T>[];
  testid?: string;
}) {
  const cls = (c: Column<T>) => (c.wide ? "wide" : undefined);
  return (
    <>
      <Problem error={props.error} what={props.what.charAt(0).toUpperCase() + props.what.slice(1)} />
      {props.loading && !props.rows ? (
        <Loading what={props.what} />
      ) : (props.rows ?? []).length === 0 ? (
        <p class="empty">{props.empty}</p>
      ) : (
        <table class="grid reflow" data-testid={props.testid}>
          <thead>
            <tr>
              {props.columns.map((c) => (
                <th scope="col" class={cls(c)}>
                  {c.hidden ? <span class="sr-only">{c.head}</span> : c.head}
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {(props.rows ?? []).map((r) => (
              <tr>
                {props.columns.map((c) => (
                  <td class={cls(c)} data-label={c.hidden ? undefined : c.head}>
                    {c.cell(r)}
                  </td>
                ))}
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}
