// A session kept current without waking it: read once, then again each
// time the change feed (GET /v1/changes) says a session changed, so its
// badge follows a suspend or a resume made anywhere. Its events, for
// onEvent, are read from the database after the last one seen
// (?follow=false) at the same moments. A live subscription (follow=true)
// would resume an idle session, and looking at one must not.
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { enc, get } from "../api/client";
import { backlog } from "../api/sse";
import type { Session, SessionEvent } from "../api/types";
import { useChanges } from "./useChanges";

export type LiveSession = { session?: Session; error?: Error; reload: () => void };

/** reader is one session's event reading: the last seq seen, and whether a read runs (again: another was asked for meanwhile). */
type reader = { seq: number; reading: boolean; again: boolean };

export function useSession(id?: string, onEvent?: (e: SessionEvent) => void): LiveSession {
  const [session, setSession] = useState<Session>();
  const [error, setError] = useState<Error>();
  const handler = useRef(onEvent);
  handler.current = onEvent;
  const cur = useRef<reader>({ seq: 0, reading: false, again: false });

  const readEvents = useCallback(
    (r: reader) => {
      if (!id || !handler.current) return;
      if (r.reading) {
        r.again = true;
        return;
      }
      r.reading = true;
      const next = (): Promise<void> =>
        backlog("/v1/sessions/" + enc(id) + "/events?follow=false&after=" + r.seq)
          .then(
            (ms) => {
              for (const m of ms) {
                if (cur.current !== r) return;
                try {
                  const e = JSON.parse(m.data) as SessionEvent;
                  r.seq = Math.max(r.seq, e.seq);
                  handler.current?.(e);
                } catch {
                  /* a malformed event is skipped */
                }
              }
            },
            () => undefined,
          )
          .then(() => {
            if (r.again && cur.current === r) {
              r.again = false;
              return next();
            }
            r.reading = false;
          });
      void next();
    },
    [id],
  );

  const reload = useCallback(() => {
    if (!id) return;
    const r = cur.current;
    get<Session>("/v1/sessions/" + enc(id)).then(
      (v) => {
        if (cur.current !== r) return;
        setSession(v);
        setError(undefined);
      },
      (e) => cur.current === r && setError(e as Error),
    );
    readEvents(r);
  }, [id, readEvents]);

  useEffect(() => {
    cur.current = { seq: 0, reading: false, again: false };
    setSession(undefined);
    reload();
  }, [reload]);
  useChanges(id ? ["sessions"] : [], reload);
  return { session, error, reload };
}
