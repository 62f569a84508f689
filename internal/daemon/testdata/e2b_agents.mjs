// Runs an agent of the OpenAI Agents SDK (npm @openai/agents) whose
// sandbox is E2B's, through the SDK's own E2B integration
// (@openai/agents-extensions/sandbox/e2b), against airlock's E2B API. The
// model is a scripted stand-in (no model service is reachable from a
// test): it asks for one exec_command call, then answers with what the
// tool returned. Everything between — the framework's sandbox session,
// the E2B SDK, airlock — is real. Prints JSON lines for the Go test.
import { run, setTracingDisabled, Usage } from '@openai/agents';
import { SandboxAgent } from '@openai/agents/sandbox';
import { E2BSandboxClient } from '@openai/agents-extensions/sandbox/e2b';

const out = (k, v) => console.log(JSON.stringify({ k, v }));
setTracingDisabled(true);

const calls = [];
const model = {
  async getResponse(req) {
    const items = Array.isArray(req.input) ? req.input : [];
    const result = items.find((i) => i.type === 'function_call_result');
    calls.push({ tools: (req.tools || []).map((t) => t.name) });
    if (!result) {
      return {
        usage: new Usage(), responseId: 'r1',
        output: [{ type: 'function_call', callId: 'c1', name: 'exec_command', status: 'completed',
          arguments: JSON.stringify({ cmd: process.env.AGENT_CMD, login: false, tty: false }) }],
      };
    }
    const o = result.output;
    const text = typeof o === 'string' ? o : o?.text ?? JSON.stringify(o);
    return {
      usage: new Usage(), responseId: 'r2',
      output: [{ type: 'message', role: 'assistant', status: 'completed', id: 'm1',
        content: [{ type: 'output_text', text }] }],
    };
  },
  async *getStreamedResponse() { throw new Error('not streamed'); },
};

try {
  const agent = new SandboxAgent({ name: 'airlock-test', instructions: 'Run the command.', model });
  const client = new E2BSandboxClient({ template: process.env.AGENT_TEMPLATE, timeout: 120 });
  const res = await run(agent, 'Run the command and report its output.', { sandbox: { client } });
  out('final', res.finalOutput);
  out('tools', calls[0]?.tools ?? []);
} catch (e) {
  out('fatal', String(e.stack || e));
  process.exit(1);
}
