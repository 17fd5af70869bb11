// useMayDrive says whether this tab may drive a task (a follow-up, the
// terminal, resume, stop) or only read it, as the API judges: owners and
// admins every task; a member one whose profile is granted to them (the
// profile is readable to them only then). Undefined while unknown, so no
// control that would answer 403 shows before it is known.
import { useEffect, useState } from "preact/hooks";
import { enc, get } from "../api/client";
import type { Task } from "../api/types";
import { isAdmin, useMe } from "./useMe";

export function useMayDrive(task?: Task): boolean | undefined {
  const me = useMe();
  const [granted, setGranted] = useState<boolean>();
  const admin = isAdmin(me);
  useEffect(() => {
    setGranted(undefined);
    if (!task || !me || admin) return;
    let live = true;
    get("/v1/profiles/" + enc(task.profile_id)).then(
      () => live && setGranted(true),
      () => live && setGranted(false),
    );
    return () => {
      live = false;
    };
  }, [task?.profile_id, me, admin]);
  if (!me || !task) return undefined;
  return admin || granted;
}

/** mayEnd says the tab may stop the task: its owner always, else as it may drive it. */
export function useMayEnd(task: Task | undefined, drive: boolean | undefined): boolean {
  const me = useMe();
  return drive === true || (!!task && !!me && task.owner_id === me.user_id);
}
