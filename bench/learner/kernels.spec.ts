import { describeOneDnn, describeThreads, isaEnv, parseOneDnnVerbose } from './kernels';

// Lines as oneDNN 3.7 prints them under ONEDNN_VERBOSE=1 (taken from libtensorflow 2.21 runs).
const AVX512_LOG = [
  'onednn_verbose,v1,info,oneDNN v3.7.3 (commit N/A)',
  'onednn_verbose,v1,info,cpu,runtime:threadpool,nthr:2',
  'onednn_verbose,v1,info,cpu,isa:Intel AVX-512 with float16, Intel DL Boost and bfloat16 support and Intel AMX with bfloat16 and 8-bit integer support',
  'onednn_verbose,v1,primitive,info,template:operation,engine,primitive,implementation,prop_kind,memory_descriptors,attributes,auxiliary,problem_desc,exec_time',
  'onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core,undef,src:f32::blocked:ab::f0 wei:f32::blocked:ab::f0 dst:f32::blocked:ab::f0,attr-scratchpad:user,,2048x128:128x128,4.18311',
  'onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core,undef,src:f32::blocked:ab::f0,,,2048x128:128x512,1.2',
].join('\n');

describe('parseOneDnnVerbose', () => {
  it('reads the version, the ISA and each distinct primitive once', () => {
    const r = parseOneDnnVerbose(`TF log line\n${AVX512_LOG}\nmore output`);
    expect(r.enabled).toBe(true);
    expect(r.version).toBe('v3.7.3');
    expect(r.isa).toBe('Intel AVX-512 with float16, Intel DL Boost and bfloat16 support and Intel AMX with bfloat16 and 8-bit integer support');
    expect(r.primitives).toEqual(['matmul brg_matmul:avx512_core']);
  });

  it('names the sgemm entry point, which logs no implementation', () => {
    const r = parseOneDnnVerbose(
      'onednn_verbose,v1,info,cpu,isa:Intel AVX2\nonednn_verbose,v1,primitive,exec,cpu,gemm_api,,undef,src_f32::blocked:ab:f0,,,2048x128:128x128,67.8',
    );
    expect(r.primitives).toEqual(['gemm_api']);
    expect(r.isa).toBe('Intel AVX2');
    expect(describeOneDnn('MatMul', r)).toBe('MatMul through oneDNN gemm_api');
  });

  it('reports no oneDNN when no primitive ran (TF_ENABLE_ONEDNN_OPTS=0)', () => {
    const r = parseOneDnnVerbose('onednn_verbose,v1,info,oneDNN v3.7.3 (commit N/A)\n');
    expect(r.enabled).toBe(false);
    expect(describeOneDnn('MatMul', r)).toBe('MatMul through Eigen (no oneDNN primitive ran)');
  });

  it('reads the older dnnl_verbose lines without a version field', () => {
    const r = parseOneDnnVerbose('dnnl_verbose,exec,cpu,matmul,gemm:jit,undef,src_f32::blocked:ab:f0,,,4x4:4x4,0.01');
    expect(r.primitives).toEqual(['matmul gemm:jit']);
  });
});

describe('isaEnv', () => {
  it('caps oneDNN, ATen and MKL at AVX2, and changes nothing natively', () => {
    expect(isaEnv('avx2')).toEqual({ ONEDNN_MAX_CPU_ISA: 'AVX2', ATEN_CPU_CAPABILITY: 'avx2', MKL_ENABLE_INSTRUCTIONS: 'AVX2' });
    expect(isaEnv('native')).toEqual({});
  });
});

describe('describeThreads', () => {
  it('lists every setting, unset ones included', () => {
    expect(describeThreads({ TF_NUM_INTRAOP_THREADS: '2', OMP_NUM_THREADS: '2' })).toBe(
      'TF_NUM_INTRAOP_THREADS=2 TF_NUM_INTEROP_THREADS=unset OMP_NUM_THREADS=2 MKL_NUM_THREADS=unset TF_ENABLE_ONEDNN_OPTS=unset',
    );
  });
});
