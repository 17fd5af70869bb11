// Names for the wire types generated from api/openapi.yaml (schema.gen.ts).
import type { components } from "./schema.gen";

type S = components["schemas"];
export type Task = S["Task"];
export type TaskEvent = S["TaskEvent"];
export type TaskDiff = S["TaskDiff"];
export type Profile = S["Profile"];
export type ProfileSpec = S["ProfileSpec"];
export type ProfileResponse = S["ProfileResponse"];
export type Receipt = S["Receipt"];
export type Session = S["Session"];
export type SessionEvent = S["Event"];
export type Op = S["Op"];
export type Image = S["Image"];
export type ImageJob = S["ImageJob"];
export type EnableImageRequest = S["EnableImageRequest"];
export type Host = S["Host"];
export type Harness = S["Harness"];
export type Secret = S["Secret"];
export type ApiErrorBody = S["Error"];
export type FileInfo = S["FileInfo"];
