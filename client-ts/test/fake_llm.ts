/**
 * The scripted model server of the Python tests (client-py/tests/fake_llm.py), started as a
 * child process: one fake that speaks Chat Completions, Responses and Anthropic Messages for
 * both languages. Its control routes: `/_fake/requests`, `/_fake/gate`, `/_fake/config`.
 */

import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { createInterface } from "node:readline";
import { resolve } from "node:path";

import { PACKAGE_ROOT } from "./support.js";

export const NOTE_TOOL = "note";
export const FACTS_HEADER = "Recorded facts from compacted history";

export type Body = Record<string, any>;

export interface FakeLLM {
  url: string;
  requests(): Promise<[string, Body][]>;
  gateTimeouts(): Promise<number>;
  gateOn(): Promise<void>;
  gateOff(): Promise<void>;
  /** Lets the server send the next streamed text delta. */
  gatePut(): Promise<void>;
  config(c: { note_with_text?: boolean; fail_next?: number }): Promise<void>;
  stop(): Promise<void>;
}

/** The repo's .venv python (make test creates it), else python3 on PATH; the fake needs only the stdlib. */
function python(): string {
  const venv = resolve(PACKAGE_ROOT, "..", ".venv", "bin", "python");
  return process.env["RECALLD_PYTHON"] ?? (existsSync(venv) ? venv : "python3");
}

export async function startFakeLLM(): Promise<FakeLLM> {
  const script = resolve(PACKAGE_ROOT, "..", "client-py", "tests", "fake_llm.py");
  const proc: ChildProcess = spawn(python(), [script], { stdio: ["pipe", "pipe", "inherit"] });
  const url: string = await new Promise((res, rej) => {
    proc.once("error", rej);
    createInterface({ input: proc.stdout! }).once("line", res);
  });
  const post = async (path: string, body: Body) => {
    await fetch(url + path, { method: "POST", body: JSON.stringify(body), headers: { "content-type": "application/json" } });
  };
  const state = async () => (await (await fetch(url + "/_fake/requests")).json()) as { requests: [string, Body][]; gate_timeouts: number };
  return {
    url,
    requests: async () => (await state()).requests,
    gateTimeouts: async () => (await state()).gate_timeouts,
    gateOn: () => post("/_fake/gate", {}),
    gateOff: () => post("/_fake/gate", { off: true }),
    gatePut: () => post("/_fake/gate", { put: 1 }),
    config: (c) => post("/_fake/config", c),
    stop: async () => {
      const exited = new Promise((res) => proc.once("exit", res));
      proc.stdin!.end();
      await exited;
    },
  };
}

function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((p: any) => (typeof p?.text === "string" ? p.text : "")).join("\n");
  return "";
}

/** [role, text] of every message or item of a request in any of the three APIs. */
export function requestTexts(path: string, body: Body): [string, string][] {
  const out: [string, string][] = [];
  if (path.endsWith("/messages")) {
    if (body["system"]) out.push(["system", textOf(body["system"])]);
    for (const m of body["messages"] ?? []) out.push([m.role, textOf(m.content)]);
  } else if (path.endsWith("/responses")) {
    if (body["instructions"]) out.push(["system", body["instructions"]]);
    const items = typeof body["input"] === "string" ? [{ role: "user", content: body["input"] }] : body["input"] ?? [];
    for (const it of items) out.push([it.role ?? it.type ?? "", textOf(it.content) || String(it.output ?? "")]);
  } else {
    for (const m of body["messages"] ?? []) out.push([m.role, textOf(m.content)]);
  }
  return out;
}

export function toolNames(body: Body): string[] {
  return (body["tools"] ?? []).map((t: any) => t.name ?? t.function?.name ?? "");
}
