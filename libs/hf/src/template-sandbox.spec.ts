import { Template } from '@huggingface/jinja';
import { ValidationError } from '@srpo/core';
import { TemplateSandbox } from './template-sandbox';

const CHATML =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
const context = {
  messages: [
    { role: 'user', content: 'Hi' },
    { role: 'assistant', content: 'Hello' },
  ],
  add_generation_prompt: true,
  eos_token: '<|im_end|>',
};
/** About 10^8 loop steps, in small arrays: seconds of work, little memory. */
const HOSTILE = '{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}done';

function refusal(f: () => unknown): ValidationError {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(ValidationError);
    return e as ValidationError;
  }
  throw new Error('no refusal');
}

describe('TemplateSandbox', () => {
  const sandbox = new TemplateSandbox(1_000);
  afterAll(() => sandbox.dispose());

  it('renders as @huggingface/jinja does in process', () => {
    expect(sandbox.render(CHATML, context)).toBe(new Template(CHATML).render(context));
    expect(sandbox.render(CHATML, { ...context, add_generation_prompt: false })).toBe(
      new Template(CHATML).render({ ...context, add_generation_prompt: false }),
    );
  });

  it('stops a template that runs past its bound, naming chat_template, and renders again afterwards', () => {
    const t0 = Date.now();
    const e = refusal(() => sandbox.render(HOSTILE, {}));
    const ms = Date.now() - t0;
    expect([e.field, e.message]).toEqual(['chat_template', 'chat_template: rendering took longer than 1000 ms; the template was stopped']);
    // Bounded: the caller got its answer at the bound, not after the loop (seconds).
    expect(ms).toBeLessThan(5_000);
    expect(sandbox.render(CHATML, context)).toBe(new Template(CHATML).render(context));
  });

  it("reports a template's own error (raise_exception) as a ValidationError", () => {
    const e = refusal(() => sandbox.render("{{ raise_exception('no system role') }}", {}));
    expect([e.field, e.message]).toEqual(['chat_template', 'chat_template: rendering failed: no system role']);
  });
});
