import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { SMOLLM2_FILES, smollm2DirProblem, smollm2ModelDir } from './smollm2-dir';

describe('smollm2ModelDir: where setup makes the real model', () => {
  it('takes SRPO_SMOLLM2_DIR, else SRPO_CACHE_DIR/models, else ~/.cache/srpo/models', () => {
    expect(smollm2ModelDir({ HOME: '/home/u' })).toBe('/home/u/.cache/srpo/models/smollm2-135m-instruct');
    expect(smollm2ModelDir({ HOME: '/home/u', SRPO_CACHE_DIR: '/ci/fresh' })).toBe('/ci/fresh/models/smollm2-135m-instruct');
    expect(smollm2ModelDir({ HOME: '/home/u', SRPO_CACHE_DIR: '/ci/fresh', SRPO_SMOLLM2_DIR: '/m/smol' })).toBe('/m/smol');
    // Relative to the working directory, as the Python script's Path(...).resolve().
    expect(smollm2ModelDir({ SRPO_SMOLLM2_DIR: 'rel/dir' })).toBe(path.resolve('rel/dir'));
    // An empty value is unset, as `${VAR:-default}` in shell and `or` in Python read it.
    expect(smollm2ModelDir({ HOME: '/home/u', SRPO_SMOLLM2_DIR: '', SRPO_CACHE_DIR: '' })).toBe('/home/u/.cache/srpo/models/smollm2-135m-instruct');
  });
});

describe('smollm2DirProblem: a directory as make-smollm2.py completes it', () => {
  const make = (files: Record<string, string>): string => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-smollm2-dir-'));
    for (const [f, text] of Object.entries(files)) fs.writeFileSync(path.join(dir, f), text);
    return dir;
  };
  const all = (tokenizerConfig = '{}'): Record<string, string> => ({
    ...Object.fromEntries(SMOLLM2_FILES.map((f) => [f, '{}'])),
    'tokenizer_config.json': tokenizerConfig,
  });

  it('accepts every required file with a chat template in chat_template.jinja or tokenizer_config.json', () => {
    expect(smollm2DirProblem(make({ ...all(), 'chat_template.jinja': '{{ messages }}' }))).toBeUndefined();
    expect(smollm2DirProblem(make(all(JSON.stringify({ chat_template: '{{ messages }}' }))))).toBeUndefined();
  });

  it('names what is missing: the directory, files, or the chat template', () => {
    expect(smollm2DirProblem('/nonexistent/smollm2')).toBe('/nonexistent/smollm2 does not exist');
    const partial = all();
    delete partial['model.safetensors'];
    delete partial['generation_config.json'];
    const dir = make(partial);
    expect(smollm2DirProblem(dir)).toBe(`${dir} lacks model.safetensors, generation_config.json`);
    expect(smollm2DirProblem(make(all()))).toMatch(/has no chat template/);
    expect(smollm2DirProblem(make(all('{not json')))).toMatch(/tokenizer_config\.json is not valid JSON/);
  });
});
