// needs: nothing
import { test } from "node:test";
import assert from "node:assert/strict";
import { DenError } from "@den/protocol";
import { parseDockerfile, type DockerfilePlan, type PlanStep } from "../src/index.js";

/** A Dockerfile from lines, so each test reads like the file it stands for. */
function df(...lines: string[]): string {
  return lines.join("\n");
}

/** Asserts parse refuses with invalid_argument naming the line (message and details) and the instruction. */
function assertRefused(text: string, line: number, instruction: string, why: RegExp, opts?: Parameters<typeof parseDockerfile>[1]): void {
  assert.throws(
    () => parseDockerfile(text, opts),
    (e: unknown) => {
      assert.ok(e instanceof DenError, `expected a DenError, got ${String(e)}`);
      assert.equal(e.code, "invalid_argument");
      assert.ok(e.message.startsWith(`Dockerfile line ${line}: ${instruction} `), e.message);
      assert.match(e.message, why);
      assert.deepEqual(e.details, { line, instruction });
      return true;
    },
  );
}

function assertInvalid(text: string, why: RegExp, opts?: Parameters<typeof parseDockerfile>[1]): void {
  assert.throws(
    () => parseDockerfile(text, opts),
    (e: unknown) => e instanceof DenError && e.code === "invalid_argument" && why.test(e.message),
  );
}

function stepsOf(text: string, opts?: Parameters<typeof parseDockerfile>[1]): PlanStep[] {
  return parseDockerfile(text, opts).steps;
}

test("a realistic python app Dockerfile becomes a plan", () => {
  const plan = parseDockerfile(
    df(
      "# syntax=docker/dockerfile:1",
      "ARG PYTHON_VERSION=3.12",
      "FROM python:${PYTHON_VERSION}-slim",
      "",
      "ARG PIP_INDEX_URL=https://pypi.org/simple",
      "ENV PYTHONUNBUFFERED=1 \\",
      "    PYTHONDONTWRITEBYTECODE=1 \\",
      '    APP_HOME="/srv/app"',
      "WORKDIR $APP_HOME",
      "COPY requirements.txt .",
      "RUN pip install --no-cache-dir \\",
      "    # pinned in requirements.txt",
      "    -r requirements.txt",
      "COPY --chown=app:app . .",
      "USER app",
      "EXPOSE 8000",
      'CMD ["gunicorn", "-b", "0.0.0.0:8000", "app:app"]',
    ),
  );
  const expected: DockerfilePlan = {
    from: "python:3.12-slim",
    steps: [
      { type: "ENV", env: { PYTHONUNBUFFERED: "1", PYTHONDONTWRITEBYTECODE: "1", APP_HOME: "/srv/app" }, line: 6 },
      { type: "WORKDIR", path: "/srv/app", line: 9 },
      { type: "COPY", src: ["requirements.txt"], dest: "/srv/app/", extract: false, line: 10 },
      {
        type: "RUN",
        cmd: "pip install --no-cache-dir     -r requirements.txt",
        env: { PIP_INDEX_URL: "https://pypi.org/simple" },
        line: 11,
      },
      { type: "COPY", src: ["."], dest: "/srv/app/", chown: "app:app", extract: false, line: 14 },
      { type: "USER", user: "app", line: 15 },
    ],
    start: { argv: ["gunicorn", "-b", "0.0.0.0:8000", "app:app"] },
    warnings: [
      "line 1: the syntax directive is ignored (Den reads the Dockerfile itself)",
      "line 16: EXPOSE has no effect in a Den template (a sandbox's ports are reached through Den's port URLs, nothing is published)",
    ],
  };
  assert.deepEqual(plan, expected);
});

test("the plan is deterministic", () => {
  const text = df("FROM debian:bookworm", "ARG B=2", "ARG A=1", "ARG C=3", "RUN make", "ENV X=1 Y=2", "COPY a b /dst/", "CMD run");
  const first = parseDockerfile(text);
  const second = parseDockerfile(text);
  assert.deepEqual(second, first);
  assert.equal(JSON.stringify(second), JSON.stringify(first));
  const run = first.steps.find((s) => s.type === "RUN");
  assert.deepEqual(Object.keys(run!.type === "RUN" ? run!.env : {}), ["A", "B", "C"]); // sorted, whatever the ARG order
});

test("CMD and ENTRYPOINT combine per docker's rules", () => {
  const cases: { name: string; lines: string[]; argv?: string[]; warning?: RegExp }[] = [
    { name: "neither", lines: [], argv: undefined },
    { name: "exec CMD", lines: ['CMD ["python", "app.py"]'], argv: ["python", "app.py"] },
    { name: "shell CMD", lines: ["CMD python app.py"], argv: ["/bin/sh", "-c", "python app.py"] },
    { name: "exec ENTRYPOINT", lines: ['ENTRYPOINT ["/entry"]'], argv: ["/entry"] },
    { name: "exec ENTRYPOINT + exec CMD", lines: ['ENTRYPOINT ["/entry", "-v"]', 'CMD ["serve", "--port=1"]'], argv: ["/entry", "-v", "serve", "--port=1"] },
    { name: "exec ENTRYPOINT + shell CMD", lines: ['ENTRYPOINT ["/entry"]', "CMD serve now"], argv: ["/entry", "/bin/sh", "-c", "serve now"] },
    { name: "CMD before ENTRYPOINT is kept", lines: ['CMD ["serve"]', 'ENTRYPOINT ["/entry"]'], argv: ["/entry", "serve"] },
    {
      name: "shell ENTRYPOINT ignores CMD",
      lines: ["ENTRYPOINT exec /entry --flag", 'CMD ["ignored"]'],
      argv: ["/bin/sh", "-c", "exec /entry --flag"],
      warning: /^line 3: CMD is ignored because ENTRYPOINT \(line 2\) is in shell form$/,
    },
    { name: "the last CMD wins", lines: ['CMD ["first"]', 'CMD ["second"]'], argv: ["second"] },
    { name: "CMD [] clears", lines: ["CMD []"], argv: [] },
    { name: "a bracket that is not JSON is shell form", lines: ["CMD [ -f /x ] && run"], argv: ["/bin/sh", "-c", "[ -f /x ] && run"] },
    { name: "no substitution in CMD", lines: ["ENV A=1", 'CMD ["echo", "$A"]'], argv: ["echo", "$A"] },
  ];
  for (const c of cases) {
    const plan = parseDockerfile(df("FROM alpine", ...c.lines));
    assert.deepEqual(plan.start?.argv, c.argv, c.name);
    if (c.argv === undefined) assert.ok(!("start" in plan), c.name);
    if (c.warning) assert.ok(plan.warnings.some((w) => c.warning!.test(w)), `${c.name}: ${plan.warnings.join("; ")}`);
  }
});

test("SHELL changes shell-form RUN, CMD and ENTRYPOINT from where it is set", () => {
  const plan = parseDockerfile(
    df(
      "FROM debian",
      "RUN echo before",
      'SHELL ["/bin/bash", "-o", "pipefail", "-c"]',
      "RUN curl -fsSL x | sh",
      'RUN ["/bin/true"]',
      "CMD serve",
    ),
  );
  assert.deepEqual(plan.steps, [
    { type: "RUN", cmd: "echo before", env: {}, line: 2 },
    { type: "RUN", argv: ["/bin/bash", "-o", "pipefail", "-c", "curl -fsSL x | sh"], env: {}, line: 4 },
    { type: "RUN", argv: ["/bin/true"], env: {}, line: 5 },
  ]);
  assert.deepEqual(plan.start, { argv: ["/bin/bash", "-o", "pipefail", "-c", "serve"] });
  // A CMD keeps the shell in effect where it was written.
  const earlier = parseDockerfile(df("FROM debian", "ENTRYPOINT run it", 'SHELL ["/bin/bash", "-c"]'));
  assert.deepEqual(earlier.start, { argv: ["/bin/sh", "-c", "run it"] });
  assertRefused(df("FROM debian", "SHELL /bin/bash -c"), 2, "SHELL", /JSON array/);
  assertRefused(df("FROM debian", "SHELL []"), 2, "SHELL", /JSON array/);
});

test("RUN: shell form as written with continuations joined, exec form as argv, no substitution", () => {
  const steps = stepsOf(
    df(
      "FROM debian",
      "ENV PKG=curl",
      "RUN apt-get update && \\",
      "    # a comment inside the continuation",
      "",
      "    apt-get install -y $PKG \\   ",
      "  && rm -rf /var/lib/apt/lists/*",
      'RUN ["sh", "-c", "echo $PKG"]',
      "run   echo lower-case keyword   ",
    ),
  );
  assert.deepEqual(steps.slice(1), [
    { type: "RUN", cmd: "apt-get update &&     apt-get install -y $PKG   && rm -rf /var/lib/apt/lists/*", env: {}, line: 3 },
    { type: "RUN", argv: ["sh", "-c", "echo $PKG"], env: {}, line: 8 },
    { type: "RUN", cmd: "echo lower-case keyword", env: {}, line: 9 },
  ]);
});

test("the escape directive and CRLF line ends", () => {
  const plan = parseDockerfile(["# escape=`", "FROM alpine", "RUN echo a `", "    b", 'ENV P="C:\\dir" Q=`$HOME', "WORKDIR /x"].join("\r\n"));
  assert.deepEqual(plan.steps, [
    { type: "RUN", cmd: "echo a     b", env: {}, line: 3 },
    { type: "ENV", env: { P: "C:\\dir", Q: "$HOME" }, line: 5 },
    { type: "WORKDIR", path: "/x", line: 6 },
  ]);
  assertRefused(df("# escape=x", "FROM alpine"), 1, "escape", /must be/);
});

test("ARG scoping: before FROM only in FROM; a bare ARG in the stage inherits; build args override declared ARGs", () => {
  const text = df(
    "ARG BASE=debian",
    "ARG TAG=bookworm",
    "ARG ONLY_GLOBAL=g",
    "FROM ${BASE}:${TAG}",
    "ARG TAG",
    "ARG MODE=dev",
    "ARG EMPTY",
    "ENV SEEN_GLOBAL=${ONLY_GLOBAL:-none} SEEN_TAG=$TAG",
    "RUN build",
  );
  const plan = parseDockerfile(text);
  assert.equal(plan.from, "debian:bookworm");
  assert.deepEqual(plan.steps, [
    { type: "ENV", env: { SEEN_GLOBAL: "none", SEEN_TAG: "bookworm" }, line: 8 },
    { type: "RUN", cmd: "build", env: { MODE: "dev", TAG: "bookworm" }, line: 9 }, // EMPTY is declared but unset
  ]);
  const overridden = parseDockerfile(text, { buildArgs: { BASE: "ubuntu", TAG: "noble", MODE: "prod", EMPTY: "", UNDECLARED: "x" } });
  assert.equal(overridden.from, "ubuntu:noble");
  assert.deepEqual(overridden.steps, [
    { type: "ENV", env: { SEEN_GLOBAL: "none", SEEN_TAG: "noble" }, line: 8 },
    { type: "RUN", cmd: "build", env: { EMPTY: "", MODE: "prod", TAG: "noble" }, line: 9 },
  ]);
  assert.ok(overridden.warnings.includes("build args not declared by any ARG are ignored: UNDECLARED"));
  // A build arg for a name declared only before FROM does not reach RUN.
  const globalOnly = parseDockerfile(df("ARG G=1", "FROM alpine", "RUN x"), { buildArgs: { G: "2" } });
  assert.deepEqual(globalOnly.steps, [{ type: "RUN", cmd: "x", env: {}, line: 3 }]);
});

test("ARG defaults expand; ENV overrides an ARG of the same name, and RUN env leaves it to the image env", () => {
  const steps = stepsOf(
    df("FROM alpine", "ARG A=1", "ARG B=${A}0 C=$A", "RUN one", "ENV A=env", "ARG D=$A", "RUN two"),
    { buildArgs: { C: "from-cli" } },
  );
  assert.deepEqual(steps, [
    { type: "RUN", cmd: "one", env: { A: "1", B: "10", C: "from-cli" }, line: 4 },
    { type: "ENV", env: { A: "env" }, line: 5 },
    { type: "RUN", cmd: "two", env: { B: "10", C: "from-cli", D: "env" }, line: 7 },
  ]);
  // As in BuildKit, the defaults of one ARG instruction see the scope from before it.
  const snapshot = parseDockerfile(df("FROM alpine", "ARG X=1 Y=$X", "RUN r"));
  assert.deepEqual(snapshot.steps, [{ type: "RUN", cmd: "r", env: { X: "1", Y: "" }, line: 3 }]);
  assert.ok(snapshot.warnings.includes("line 2: $X is not set here and expands to an empty string"));
  // Before FROM, each ARG sees the ones before it.
  assert.equal(parseDockerfile(df("ARG V=3 IMG=py:$V", "FROM $IMG")).from, "py:3");
});

test("variable substitution forms", () => {
  const cases: [string, string][] = [
    ["$SET", "value"],
    ["${SET}", "value"],
    ["pre${SET}post", "prevaluepost"],
    ["${UNSET:-fallback}", "fallback"],
    ["${EMPTY:-fallback}", "fallback"],
    ["${EMPTY-fallback}", ""],
    ["${UNSET-fallback}", "fallback"],
    ["${SET:-fallback}", "value"],
    ["${SET:+alt}", "alt"],
    ["${EMPTY:+alt}", ""],
    ["${EMPTY+alt}", "alt"],
    ["${UNSET:+alt}", ""],
    ["${UNSET:-${SET}}", "value"],
    ["${UNSET:-'${SET}'}", "${SET}"],
    ["\\$SET", "$SET"],
    ["'$SET'", "$SET"],
    ['"$SET"', "value"],
    ['"\\$SET"', "$SET"],
    ['"a\\tb"', "a\\tb"],
    ["a\\ b", "a b"],
    ["$", "$"],
    ["${SET:?must}", "value"],
  ];
  for (const [written, expected] of cases) {
    const plan = parseDockerfile(df("FROM alpine", "ARG SET=value", "ARG EMPTY=", `ENV OUT=${written}`));
    assert.deepEqual(plan.steps[0], { type: "ENV", env: { OUT: expected }, line: 4 }, written);
  }
  assertRefused(df("FROM alpine", "ENV A=${B"), 2, "ENV", /missing its '\}'/);
  assertRefused(df("FROM alpine", "ENV A=${}"), 2, "ENV", /bad substitution/);
  assertRefused(df("FROM alpine", "ENV A=${B/x/y}"), 2, "ENV", /does not support/);
  assertRefused(df("FROM alpine", "ENV A=${B:?B-is-required}"), 2, "ENV", /requires B: B-is-required/);
  assertRefused(df("FROM alpine", "ENV A='open"), 2, "ENV", /unmatched single quote/);
  assertRefused(df("FROM alpine", 'ENV A="open'), 2, "ENV", /unmatched double quote/);
});

test("substitution applies in FROM, COPY, ADD, WORKDIR, USER and flags, with a warning for undeclared names", () => {
  const plan = parseDockerfile(
    df(
      "ARG REG=registry.example.com",
      "FROM $REG/base:1",
      "ARG APP=web UID=1000",
      "ENV DIR=/opt/${APP}",
      "WORKDIR $DIR",
      "COPY --chown=${UID}:${UID} --chmod=0${MODE:-644} ${APP}.conf $DIR/etc/",
      "ADD ${APP}.tgz .",
      "USER ${UID}",
      "WORKDIR $NOT_DECLARED/sub",
    ),
  );
  assert.equal(plan.from, "registry.example.com/base:1");
  assert.deepEqual(plan.steps.slice(1), [
    { type: "WORKDIR", path: "/opt/web", line: 5 },
    { type: "COPY", src: ["web.conf"], dest: "/opt/web/etc/", chown: "1000:1000", chmod: "0644", extract: false, line: 6 },
    { type: "COPY", src: ["web.tgz"], dest: "/opt/web/", extract: true, line: 7 },
    { type: "USER", user: "1000", line: 8 },
    { type: "WORKDIR", path: "/sub", line: 9 },
  ]);
  assert.deepEqual(plan.warnings, ["line 9: $NOT_DECLARED is not set here and expands to an empty string"]);
});

test("ENV: both forms, quoting, and references to earlier ENV and ARG", () => {
  const steps = stepsOf(
    df(
      "FROM alpine",
      "ARG VER=2",
      'ENV a=b c="d e" f=\'$VER\' g=x\\ y',
      "ENV LEGACY the rest  of the line",
      "ENV V=$VER V2=${a}${c}",
      "ENV a=changed b=$a",
      "ENV EMPTY=",
    ),
  );
  assert.deepEqual(steps, [
    { type: "ENV", env: { a: "b", c: "d e", f: "$VER", g: "x y" }, line: 3 },
    { type: "ENV", env: { LEGACY: "the rest  of the line" }, line: 4 },
    { type: "ENV", env: { V: "2", V2: "bd e" }, line: 5 },
    { type: "ENV", env: { a: "changed", b: "b" }, line: 6 }, // b sees a from before this ENV, as in docker
    { type: "ENV", env: { EMPTY: "" }, line: 7 },
  ]);
  assertRefused(df("FROM alpine", "ENV ONLYNAME"), 2, "ENV", /needs a value/);
  assertRefused(df("FROM alpine", "ENV a=1 b"), 2, "ENV", /without =/);
  assertRefused(df("FROM alpine", "ENV =1"), 2, "ENV", /blank name/);
});

test("the base image's env and working directory, when given, resolve as docker's would", () => {
  const text = df("FROM python:3.12", 'ENV PATH="/app/.venv/bin:$PATH"', "WORKDIR src", "COPY . .");
  const plan = parseDockerfile(text, { base: { env: { PATH: "/usr/local/bin:/usr/bin" }, workdir: "/home/app" } });
  assert.deepEqual(plan.steps, [
    { type: "ENV", env: { PATH: "/app/.venv/bin:/usr/local/bin:/usr/bin" }, line: 2 },
    { type: "WORKDIR", path: "/home/app/src", line: 3 },
    { type: "COPY", src: ["."], dest: "/home/app/src/", extract: false, line: 4 },
  ]);
  assert.deepEqual(plan.warnings, []);
  const blind = parseDockerfile(text);
  assert.deepEqual(blind.steps[0], { type: "ENV", env: { PATH: "/app/.venv/bin:" }, line: 2 });
  assert.deepEqual(blind.warnings, ["line 2: $PATH is not set here and expands to an empty string"]);
  // The base image's env also overrides a same-named ARG in RUN env.
  const run = stepsOf(df("FROM x", "ARG HOME=/tmp", "ARG OTHER=1", "RUN r"), { base: { env: { HOME: "/root" } } });
  assert.deepEqual(run, [{ type: "RUN", cmd: "r", env: { OTHER: "1" }, line: 4 }]);
});

test("WORKDIR resolves against the previous one; USER is kept as given", () => {
  const steps = stepsOf(
    df("FROM alpine", "WORKDIR app", "WORKDIR ./src/../lib/", "WORKDIR ../..", "WORKDIR /abs/x", "USER nobody", "USER 1000", "USER app:staff", "USER 1000:1000"),
  );
  assert.deepEqual(steps, [
    { type: "WORKDIR", path: "/app", line: 2 },
    { type: "WORKDIR", path: "/app/lib", line: 3 },
    { type: "WORKDIR", path: "/", line: 4 },
    { type: "WORKDIR", path: "/abs/x", line: 5 },
    { type: "USER", user: "nobody", line: 6 },
    { type: "USER", user: "1000", line: 7 },
    { type: "USER", user: "app:staff", line: 8 },
    { type: "USER", user: "1000:1000", line: 9 },
  ]);
  assertRefused(df("FROM alpine", "USER a b"), 2, "USER", /name or uid/);
  assertRefused(df("FROM alpine", "USER a:b:c"), 2, "USER", /name or uid/);
  assertRefused(df("FROM alpine", "USER"), 2, "USER", /needs a user/);
  assertRefused(df("FROM alpine", "WORKDIR"), 2, "WORKDIR", /needs a path/);
});

test("COPY and ADD: sources in the context, destinations made absolute, flags, tarballs unpacked", () => {
  const steps = stepsOf(
    df(
      "FROM alpine",
      "WORKDIR /app",
      "COPY a.txt b.txt ./conf/",
      'COPY ["my file.txt", "/etc/my file.txt"]',
      "COPY ./x/../y/ /abs/./z",
      "COPY /lib/thing relative",
      "COPY --link --chmod=755 run.sh ..",
      "ADD site.tar.gz vendor.TGZ data.tar notes.txt big.tar.xz /srv/",
      "ADD plain.txt .",
    ),
  );
  const copy = (src: string[], dest: string, line: number, extra: object = {}) => ({ type: "COPY", src, dest, ...extra, extract: false, line });
  assert.deepEqual(steps.slice(1), [
    copy(["a.txt", "b.txt"], "/app/conf/", 3),
    copy(["my file.txt"], "/etc/my file.txt", 4),
    copy(["y"], "/abs/z", 5),
    copy(["lib/thing"], "/app/relative", 6),
    copy(["run.sh"], "/", 7, { chmod: "755" }),
    copy(["notes.txt", "big.tar.xz"], "/srv/", 8),
    { type: "COPY", src: ["site.tar.gz", "vendor.TGZ", "data.tar"], dest: "/srv/", extract: true, line: 8 },
    copy(["plain.txt"], "/app/", 9),
  ]);
  const plan = parseDockerfile(df("FROM alpine", "ADD big.tar.xz /srv/"));
  assert.deepEqual(plan.warnings, ["line 2: ADD copies big.tar.xz without unpacking it (Den unpacks .tar, .tar.gz and .tgz)"]);
});

test("COPY and ADD sources may not climb out of the context", () => {
  for (const src of ["..", "../secret", "a/../../secret", "/../etc/passwd", "./../x", "${UP}/x"]) {
    assertRefused(df("FROM alpine", "ARG UP=..", `COPY ${src} /dst/`), 3, "COPY", /outside the build context/);
  }
  assertRefused(df("FROM alpine", "ADD ../x.tar /"), 2, "ADD", /outside the build context/);
  assertRefused(df("FROM alpine", "COPY a b dest"), 2, "COPY", /directory ending in \//);
  assertRefused(df("FROM alpine", "COPY onlyone"), 2, "COPY", /source and a destination/);
  assertRefused(df("FROM alpine", "COPY --chmod=u+x a b"), 2, "COPY", /octal/);
  assertRefused(df("FROM alpine", "COPY --chown a b"), 2, "COPY", /needs a value/);
  assertRefused(df("FROM alpine", "COPY --chown='a b' a b"), 2, "COPY", /user\[:group\]/);
});

test("what a single-stage microVM build cannot do is refused with the line", () => {
  const cases: [string[], number, string, RegExp][] = [
    [["FROM a AS build", "RUN make", "FROM b"], 3, "FROM", /one stage/],
    [["FROM a", "COPY --from=build /out /out"], 2, "COPY", /--from is not supported/],
    [["FROM a", "COPY --from=nginx:latest /etc/nginx /etc/nginx"], 2, "COPY", /--from is not supported/],
    [["FROM --platform=linux/arm64 a"], 1, "FROM", /--platform is not supported/],
    [["FROM a", "RUN --mount=type=cache,target=/root/.cache pip install x"], 2, "RUN", /--mount is not supported/],
    [["FROM a", "RUN --network=none make test"], 2, "RUN", /--network is not supported/],
    [["FROM a", "RUN --security=insecure make"], 2, "RUN", /--security is not supported/],
    [["FROM a", "RUN --bogus make"], 2, "RUN", /unknown flag --bogus/],
    [["FROM a", "ONBUILD RUN make"], 2, "ONBUILD", /not supported/],
    [["FROM a", "RUN <<EOF", "echo hi", "EOF"], 2, "RUN", /heredoc/],
    [["FROM a", "RUN python3 - <<'PY'", "print(1)", "PY"], 2, "RUN", /heredoc/],
    [["FROM a", "COPY <<EOF /etc/conf", "x=1", "EOF"], 2, "COPY", /heredoc/],
    [["FROM a", "ADD <<-EOT /x", "y", "EOT"], 2, "ADD", /heredoc/],
    [["FROM a", "ADD http://example.com/x.tgz /x"], 2, "ADD", /URL/],
    [["FROM a", "ADD https://example.com/x.tgz /x"], 2, "ADD", /URL/],
    [["FROM a", "ADD git://example.com/repo.git /x"], 2, "ADD", /URL/],
    [["FROM a", "ADD git@github.com:org/repo.git /x"], 2, "ADD", /URL/],
    [["FROM a", "ADD --checksum=sha256:abc x /x"], 2, "ADD", /--checksum is not supported/],
    [["FROM a", "FLY away"], 2, "FLY", /not a Dockerfile instruction/],
    [["FROM a", "RUN x", "  echo hi"], 3, "ECHO", /not a Dockerfile instruction/],
    [["RUN apt-get update", "FROM a"], 1, "RUN", /before FROM/],
    [["FROM"], 1, "FROM", /image/],
    [["FROM a b"], 1, "FROM", /image and an optional AS name/],
    [["FROM a", "RUN"], 2, "RUN", /needs a command/],
    [["FROM a", "RUN []"], 2, "RUN", /needs a command/],
    [["FROM a", "CMD"], 2, "CMD", /needs a command/],
    [["FROM a", "CMD --help"], 2, "CMD", /unknown flag --help/],
    [["FROM a", "WORKDIR --x /a"], 2, "WORKDIR", /unknown flag --x/],
    [["FROM a", "COPY --chown=a --chown=b x y"], 2, "COPY", /twice/],
    [["FROM a", "ARG"], 2, "ARG", /needs a name/],
    [["FROM a", "ARG 1X=2"], 2, "ARG", /invalid name/],
  ];
  for (const [lines, line, instruction, why] of cases) assertRefused(df(...lines), line, instruction, why);
});

test("instructions with no effect in a microVM are accepted with a warning naming the line", () => {
  const plan = parseDockerfile(
    df(
      "FROM alpine",
      "LABEL org.opencontainers.image.source=https://example.com",
      "MAINTAINER someone@example.com",
      "EXPOSE 8080/tcp",
      "STOPSIGNAL SIGTERM",
      "HEALTHCHECK --interval=5s CMD curl -f http://localhost/ || exit 1",
      "VOLUME /data",
      "RUN true",
    ),
  );
  assert.deepEqual(plan.steps, [{ type: "RUN", cmd: "true", env: {}, line: 8 }]);
  const expected = ["LABEL", "MAINTAINER", "EXPOSE", "STOPSIGNAL", "HEALTHCHECK", "VOLUME"];
  assert.equal(plan.warnings.length, expected.length);
  expected.forEach((keyword, i) => assert.match(plan.warnings[i]!, new RegExp(`^line ${i + 2}: ${keyword} has no effect`)));
});

test("limits: size, instruction count, and what expansion may build", () => {
  assertInvalid("", /no FROM/);
  assertInvalid("# just a comment\n", /no FROM/);
  assertInvalid(df("ARG A=1"), /no FROM/);
  const big = `FROM a\nRUN echo ${"x".repeat(1024 * 1024)}`;
  assertInvalid(big, /over the limit of 1048576/);
  assert.equal(parseDockerfile(big, { maxBytes: 2 * 1024 * 1024 }).steps.length, 1);
  assertInvalid("FROM a\nRUN echo hé", /over the limit of 12/, { maxBytes: 12 }); // bytes, not characters
  const many = ["FROM a", ...Array.from({ length: 1000 }, (_, i) => `RUN echo ${i}`)].join("\n");
  assertInvalid(many, /1001 instructions, over the limit of 1000/);
  assert.equal(parseDockerfile(many, { maxInstructions: 1001 }).steps.length, 1000);
  assertInvalid(df("FROM a", "RUN a", "RUN b"), /over the limit of 2/, { maxInstructions: 2 });
  // Doubling a variable is stopped at the word bound, with the line.
  const doubling = ["FROM a", `ENV A=${"x".repeat(1000)}`, ...Array.from({ length: 20 }, () => "ENV A=$A$A")];
  assertRefused(df(...doubling), 11, "ENV", /expands to more than 262144 characters/);
  // Many large steps are stopped at the plan bound.
  const wide = ["FROM a", `ARG A=${"x".repeat(200 * 1024)}`, ...Array.from({ length: 100 }, () => "ENV B=$A")];
  assertRefused(df(...wide), 84, "ENV", /build plan larger than/);
  // Deeply nested substitutions are refused, not recursed into.
  assertRefused(df("FROM a", `ENV A=${"${X:-".repeat(40)}x${"}".repeat(40)}`), 2, "ENV", /nests substitutions too deeply/);
  assertInvalid(df("FROM a"), /must be a string/, { buildArgs: { A: 1 as unknown as string } });
});
