// useMembers reads the organisation's members for an admin (to name the
// user ids of grants, keys and the audit log by email); for anyone else
// it reads nothing (GET /v1/members is an admin's).
import { listAll, type Page } from "../api/client";
import type { Member } from "../api/types";
import { useLoad } from "./useLoad";

export function useMembers(admin: boolean) {
  return useLoad<Page<Member>>((s) => (admin ? listAll<Member>("/v1/members", s) : Promise.resolve({ items: [], next_cursor: "" })), [admin]);
}
