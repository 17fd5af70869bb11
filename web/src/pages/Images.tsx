// Images: the list with each one's state, and the enable form.
import { useEffect, useState } from "preact/hooks";
import { enc, get, listAll, post } from "../api/client";
import type { EnableImageRequest, Image, ImageList } from "../api/types";
import { ago, jobStage } from "../lib/format";
import { useLoad } from "../lib/useLoad";
import { navigate } from "../router";
import { Problem } from "../ui/Problem";
import { Table } from "../ui/Table";
import { StateBadge } from "../ui/StateBadge";
import { isAdmin, useMe } from "../lib/useMe";

export function Images() {
  const list = useLoad((s) => listAll<Image>("/v1/images", s), []);
  useEffect(() => {
    const t = setInterval(list.reload, 3000);
    return () => clearInterval(t);
  }, [list.reload]);
  const images = list.value?.items ?? [];
  // what an enable that leaves a size out gets, as the server says
  const defaults = useLoad((s) => get<ImageList>("/v1/images?limit=1", s), []);
  const admin = isAdmin(useMe());
  return (
    <>
      <h1>Images</h1>
      {admin && <EnableForm defaults={defaults.value?.defaults} />}
      <Table
        what="images"
        rows={list.value ? images : undefined}
        loading={list.loading}
        error={list.error}
        testid="image-list"
        empty="No images enabled yet."
        columns={[
          { head: "Name", cell: (i) => <a href={"/images/" + enc(i.name)}>{i.name}</a> },
          {
            head: "State",
            cell: (i) => (
              <>
                <StateBadge state={i.state === "pending" ? "enabling" : i.state} label="Image" />
                {i.last_job && i.state === "pending" && <span class="muted small"> {i.last_job.stage ? jobStage(i.last_job.stage) : i.last_job.state}</span>}
              </>
            ),
          },
          { head: "Reference", wide: true, cell: (i) => <code>{i.ref}</code> },
          { head: "Changed", cell: (i) => ago(i.updated_at) },
        ]}
      />
    </>
  );
}

function EnableForm(props: { defaults?: ImageList["defaults"] }) {
  const d = props.defaults;
  const [ref, setRef] = useState("");
  const [name, setName] = useState("");
  const [mem, setMem] = useState("");
  const [disk, setDisk] = useState("");
  const [warmup, setWarmup] = useState("");
  const [vcpus, setVcpus] = useState("");
  const [workdir, setWorkdir] = useState("");
  const [env, setEnv] = useState("");
  const [user, setUser] = useState("");
  const [password, setPassword] = useState("");
  const [error, setError] = useState<Error>();
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    const req: EnableImageRequest = { ref: ref.trim() };
    if (name.trim()) req.name = name.trim();
    if (mem) req.memory_mib = parseInt(mem, 10);
    if (disk) req.disk_gib = parseInt(disk, 10);
    if (warmup.trim()) req.warmup = warmup;
    if (vcpus) req.vcpus = parseInt(vcpus, 10);
    if (workdir.trim()) req.workdir = workdir.trim();
    const vars = env
      .split("\n")
      .map((l) => l.trim())
      .filter(Boolean);
    if (vars.length)
      req.env = Object.fromEntries(
        vars.map((l) => {
          const i = l.indexOf("=");
          return i < 0 ? [l, ""] : [l.slice(0, i), l.slice(i + 1)];
        }),
      );
    if (user || password) req.credentials = { username: user, password };
    try {
      const r = await post<{ image: Image }>("/v1/images", req);
      navigate("/images/" + enc(r.image.name));
    } catch (err) {
      setError(err as Error);
      setBusy(false);
    }
  };
  return (
    <details class="enable">
      <summary>Enable an image</summary>
      <form onSubmit={submit} class="editor">
        <div class="row">
          <label for="i-ref">Reference</label>
          <input id="i-ref" value={ref} onInput={(e) => setRef(e.currentTarget.value)} placeholder="registry.example/team/image:tag" required />
        </div>
        <div class="row">
          <label for="i-name">Name</label>
          <input id="i-name" value={name} onInput={(e) => setName(e.currentTarget.value)} placeholder="derived from the reference" />
        </div>
        <div class="row inline">
          <label for="i-mem">Memory (MiB)</label>
          <input id="i-mem" inputMode="numeric" value={mem} onInput={(e) => setMem(e.currentTarget.value)} placeholder={d ? String(d.memory_mib) : ""} />
          <label for="i-disk">Disk (GiB)</label>
          <input id="i-disk" inputMode="numeric" value={disk} onInput={(e) => setDisk(e.currentTarget.value)} placeholder={d ? String(d.disk_gib) : ""} />
        </div>
        <div class="row inline">
          <label for="i-vcpus">vCPUs</label>
          <input id="i-vcpus" inputMode="numeric" value={vcpus} onInput={(e) => setVcpus(e.currentTarget.value)} placeholder={d ? String(d.vcpus) : ""} />
          <label for="i-workdir">Working directory</label>
          <input id="i-workdir" value={workdir} onInput={(e) => setWorkdir(e.currentTarget.value)} placeholder="the image's WORKDIR" />
        </div>
        <div class="row">
          <label for="i-env">Environment</label>
          <textarea id="i-env" rows={2} value={env} onInput={(e) => setEnv(e.currentTarget.value)} placeholder="KEY=value per line" />
        </div>
        <div class="row inline">
          <label for="i-user">Registry user</label>
          <input id="i-user" autocomplete="off" value={user} onInput={(e) => setUser(e.currentTarget.value)} placeholder="anonymous" />
          <label for="i-pass">Password or token</label>
          <input id="i-pass" type="password" autocomplete="off" value={password} onInput={(e) => setPassword(e.currentTarget.value)} />
        </div>
        <div class="row">
          <label for="i-warmup">Warm-up command</label>
          <textarea id="i-warmup" rows={2} value={warmup} onInput={(e) => setWarmup(e.currentTarget.value)} placeholder="run once before the base snapshot" />
        </div>
        <Problem error={error} what="Could not enable" />
        <button type="submit" disabled={busy || !ref.trim()}>
          {busy ? "Enabling…" : "Enable"}
        </button>
      </form>
    </details>
  );
}
