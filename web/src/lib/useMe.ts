// useMe is who the tab is signed in as (GET /v1/me), read once per
// sign-in and shared by every page: what the navigation and the pages
// offer follows the role, so no button answers 403.
import { useEffect, useState } from "preact/hooks";
import { get } from "../api/client";
import type { WhoAmI } from "../api/types";

let me: Promise<WhoAmI> | undefined;

/** forgetMe drops the tab's idea of who it is (at sign-in and sign-out). */
export function forgetMe(): void {
  me = undefined;
}

export function useMe(): WhoAmI | undefined {
  const [value, setValue] = useState<WhoAmI>();
  useEffect(() => {
    let live = true;
    me ??= get<WhoAmI>("/v1/me").catch((e) => {
      me = undefined; // asked again on the next page
      throw e;
    });
    me.then((v) => live && setValue(v)).catch(() => undefined);
    return () => {
      live = false;
    };
  }, []);
  return value;
}

/** isAdmin says me may curate images, profiles, secrets, integrations, automations, members and keys. */
export const isAdmin = (me?: WhoAmI) => me?.role === "admin" || me?.role === "owner";

/** isFleet says me manages hosts. */
export const isFleet = (me?: WhoAmI) => me?.fleet_operator === true;
