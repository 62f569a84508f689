package dockerfile

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
)

func TestParse(t *testing.T) {
	src := `# syntax=docker/dockerfile:1
# A Python tool.
ARG BASE=debian
ARG TAG
FROM ${BASE}:${TAG:-bookworm} AS build
ARG PIP_INDEX=https://pypi.mirror.lan/simple
ENV APP=/srv/app \
    PATH="/srv/app/bin:$PATH" GREETING='hello $APP'
ENV LEGACY some value here
# apt, then our code
RUN apt-get update && \
    # a comment inside the continuation
    apt-get install -y python3
RUN ["python3", "-m", "venv", "$APP"]
COPY --chown=1000:1000 --chmod=0755 run.sh ${APP}/
ADD ["data dir/", "/srv/data"]
WORKDIR $APP
USER app:app
LABEL org.example.tool="python tool" version=1
CMD ["python3", "main.py"]
ENTRYPOINT /srv/app/entry.sh --flag
`
	f, err := Parse([]byte(src), map[string]string{"TAG": "trixie"})
	if err != nil {
		t.Fatal(err)
	}
	if f.From != "debian:trixie" || f.FromLine != 5 {
		t.Errorf("FROM = %q at %d", f.From, f.FromLine)
	}
	want := []Step{
		{Line: 6, Kind: Arg, Pairs: []KV{{"PIP_INDEX", "https://pypi.mirror.lan/simple", true}}},
		{Line: 7, Kind: Env, Pairs: []KV{{"APP", "/srv/app", true}, {"PATH", "/srv/app/bin:", true}, {"GREETING", "hello $APP", true}}},
		{Line: 9, Kind: Env, Pairs: []KV{{"LEGACY", "some value here", true}}},
		{Line: 11, Kind: Run, Args: []string{"/bin/sh", "-c", "apt-get update &&     apt-get install -y python3"}},
		{Line: 14, Kind: Run, Exec: true, Args: []string{"python3", "-m", "venv", "$APP"}},
		{Line: 15, Kind: Copy, Sources: []string{"run.sh"}, Dest: "/srv/app/", Chown: "1000:1000", Chmod: "0755"},
		{Line: 16, Kind: Add, Sources: []string{"data dir/"}, Dest: "/srv/data"},
		{Line: 17, Kind: Workdir, Value: "/srv/app"},
		{Line: 18, Kind: User, Value: "app:app"},
		{Line: 19, Kind: Label, Pairs: []KV{{"org.example.tool", "python tool", true}, {"version", "1", true}}},
		{Line: 20, Kind: Cmd, Exec: true, Args: []string{"python3", "main.py"}},
		{Line: 21, Kind: Entrypoint, Args: []string{"/bin/sh", "-c", "/srv/app/entry.sh --flag"}},
	}
	if len(f.Steps) != len(want) {
		t.Fatalf("%d steps, want %d: %+v", len(f.Steps), len(want), f.Steps)
	}
	for i, st := range f.Steps {
		st.Text = ""
		if !reflect.DeepEqual(st, want[i]) {
			t.Errorf("step %d = %+v\nwant      %+v", i, st, want[i])
		}
	}
	if !strings.HasPrefix(f.Steps[3].Text, "RUN apt-get update") {
		t.Errorf("the RUN's text = %q", f.Steps[3].Text)
	}
}

func TestParseArgs(t *testing.T) {
	// A global ARG is usable in FROM; after FROM only once declared
	// again; a build argument overrides a default.
	src := "ARG V=1\nFROM img:$V\nENV A=$V\nARG V\nENV B=$V\nARG W=x\nENV C=$W\n"
	f, err := Parse([]byte(src), map[string]string{"W": "given"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, st := range f.Steps {
		if st.Kind == Env {
			got[st.Pairs[0].Key] = st.Pairs[0].Value
		}
	}
	if f.From != "img:1" || got["A"] != "" || got["B"] != "1" || got["C"] != "given" {
		t.Errorf("FROM %q, ENVs %v; want img:1, A empty, B 1, C given", f.From, got)
	}
	if f, err := Parse([]byte("# escape=`\nFROM a\nRUN echo \\ `\n  done\n"), nil); err != nil || f.Steps[0].Args[2] != "echo \\   done" {
		t.Errorf("the backtick escape: %+v %v", f, err)
	}
}

func TestParseRefused(t *testing.T) {
	tests := []struct {
		name, src string
		args      map[string]string
		line      int
		msg       string
	}{
		{"empty", "", nil, 0, "no FROM"},
		{"comments only", "# x\n\n", nil, 0, "no FROM"},
		{"before FROM", "RUN true\nFROM a\n", nil, 1, "RUN before FROM"},
		{"unknown", "FROM a\nFROOM b\n", nil, 2, `unknown instruction "FROOM"`},
		{"expose", "FROM a\nEXPOSE 80\n", nil, 2, "EXPOSE is not supported"},
		{"healthcheck", "FROM a\nhealthcheck CMD true\n", nil, 2, "HEALTHCHECK is not supported"},
		{"multi-stage", "FROM a AS b\nFROM c\n", nil, 2, "multi-stage"},
		{"copy from", "FROM a\nCOPY --from=b /x /y\n", nil, 2, "multi-stage"},
		{"run mount", "FROM a\nRUN --mount=type=cache,target=/x true\n", nil, 2, "RUN --mount=type=cache,target=/x is not supported"},
		{"run network", "FROM a\nRUN --network=host curl x\n", nil, 2, "RUN --network=host"},
		{"heredoc", "FROM a\nRUN <<EOF\necho\nEOF\n", nil, 2, "heredocs"},
		{"add url", "FROM a\nADD https://example.com/x /x\n", nil, 2, "only files of the build's context"},
		{"copy one word", "FROM a\nCOPY x\n", nil, 2, "at least one source and a destination"},
		{"copy bad json", "FROM a\nCOPY [\"a\", \n", nil, 2, "JSON form"},
		{"chmod", "FROM a\nCOPY --chmod=u+x a /b\n", nil, 2, "octal mode"},
		{"unknown flag", "FROM a\nCOPY --link a /b\n", nil, 2, "COPY --link is not supported"},
		{"from flag", "FROM --platform=linux/arm64 a\n", nil, 1, "flags are not supported"},
		{"from words", "FROM a b\n", nil, 1, "FROM wants an image"},
		{"from empty", "ARG X\nFROM $X\n", nil, 2, "empty once substituted"},
		{"env name", "FROM a\nENV 1A=b\n", nil, 2, "not a variable name"},
		{"env no value", "FROM a\nENV\n", nil, 2, "ENV needs name=value"},
		{"env word", "FROM a\nENV A=1 B\n", nil, 2, `"B": want name=value`},
		{"quote", "FROM a\nENV A=\"x\n", nil, 2, "unterminated"},
		{"brace", "FROM a\nENV A=${B\n", nil, 2, "unterminated ${"},
		{"substitution", "FROM a\nENV A=${B/x/y}\n", nil, 2, "only ${NAME}"},
		{"undeclared arg", "FROM a\n", map[string]string{"NOPE": "1"}, 0, `build argument "NOPE" is given but no ARG declares it`},
		{"arg two", "FROM a\nARG A B\n", nil, 2, "ARG declares one name"},
		{"workdir empty", "FROM a\nWORKDIR\n", nil, 2, "WORKDIR needs a value"},
		{"cmd empty json", "FROM a\nCMD []\n", nil, 2, "names no program"},
		{"escape", "# escape=x\nFROM a\n", nil, 1, "escape="},
		{"binary", "FROM a\nRUN \xff\n", nil, 0, "not UTF-8"},
		{"too big", "FROM a\n" + strings.Repeat("#", MaxSize), nil, 0, "over"},
		{"too many", "FROM a\n" + strings.Repeat("ENV A=1\n", MaxSteps+1), nil, MaxSteps + 2, "over 1000 instructions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.src), tt.args)
			var e *Error
			if !errors.As(err, &e) || e.Line != tt.line || !strings.Contains(e.Msg, tt.msg) {
				t.Fatalf("Parse = %v; want line %d saying %q", err, tt.line, tt.msg)
			}
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("%v is not ErrInvalid", err)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add("FROM a\nRUN echo $HOME\nCOPY --chown=1:1 a b /c/\nENV A=\"b c\" D=${A:-x}\n", "X")
	f.Add("ARG A=1\nFROM b:${A}\nLABEL a='b' \\\n c=d\nCMD [\"a\"]\n", "A")
	f.Fuzz(func(t *testing.T, src, arg string) {
		file, err := Parse([]byte(src), map[string]string{arg: "v"})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("an error that is not an *Error: %v", err)
			}
			return
		}
		if file.From == "" || len(file.Steps) > MaxSteps {
			t.Fatalf("a parse without FROM, or too many steps: %+v", file)
		}
		for _, st := range file.Steps {
			if (st.Kind == Run || st.Kind == Cmd || st.Kind == Entrypoint) && len(st.Args) == 0 {
				t.Fatalf("%s without a command", st.Kind)
			}
		}
	})
}
