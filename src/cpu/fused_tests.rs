//! The fused interpreter against the op-by-op kernels: random chains of every table op (unary,
//! binary, scalar, comparisons, `where`, `clamp`, casts) over packed, broadcast and transposed
//! inputs holding NaN, infinities, signed zeros and integer extremes; the fused output must have
//! the op-by-op output's bits, at sizes around the block edges.

use crate::cpu::elementwise as ew;
use crate::cpu::fused::BLOCK;
use crate::cpu::normal::{sample_host, Dist};
use crate::cpu::storage::CpuStorage;
use crate::cpu::typed::{self, dtype_of, Scalar};
use crate::ops::backend::ProgramCall;
use crate::ops::program::{Expr, NodeId, Program};
use crate::ops::{BinaryOp, CmpOp, UnaryOp};
use crate::shape::Layout;
use crate::DType;
use half::f16;

/// `cpu::fused::run` of the program's parts, as the tests spell them.
fn run(
    name: &'static str,
    program: &Program,
    views: &[(&CpuStorage, &Layout)],
    scalars: &[u32],
    shape: &[usize],
) -> crate::Result<CpuStorage> {
    crate::cpu::fused::run(&ProgramCall {
        name,
        program,
        views,
        scalars,
        shape,
    })
}

/// xorshift64*: reproducible without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn f32(&mut self) -> f32 {
        const SPECIAL: [f32; 8] = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1.0,
            -1.0,
            65504.0,
        ];
        match self.below(16) {
            0 => SPECIAL[self.below(SPECIAL.len())],
            1 => (self.next() as i64 as f32) * 1e-15,
            _ => (self.next() % 20_000) as f32 / 1000.0 - 10.0,
        }
    }
    fn i32(&mut self) -> i32 {
        match self.below(8) {
            0 => [i32::MIN, i32::MAX, 0, -1][self.below(4)],
            1 => self.next() as i32,
            _ => (self.next() % 200) as i32 - 100,
        }
    }
}

/// A value of the chain: its op-by-op data, read through `l`, and its node in the program.
struct Val {
    s: CpuStorage,
    l: Layout,
    node: NodeId,
}

fn dt(v: &Val) -> DType {
    dtype_of(&v.s)
}

fn scalar_of(d: DType, x: f32, i: i32) -> (Scalar, u32, DType) {
    let s = match d {
        DType::F32 | DType::F16 => Scalar::F(x),
        DType::I32 => Scalar::I(i),
        _ => Scalar::U(i as u32),
    };
    let sd = if d == DType::F16 { DType::F32 } else { d };
    (s, s.bits(), sd)
}

fn bits(s: &CpuStorage) -> Vec<u32> {
    match s {
        CpuStorage::F32(v) => v.iter().map(|x| x.to_bits()).collect(),
        CpuStorage::F16(v) => v.iter().map(|x| u32::from(x.to_bits())).collect(),
        CpuStorage::I32(v) => v.iter().map(|&x| x as u32).collect(),
        CpuStorage::U32(v) => v.clone(),
        CpuStorage::U8(v) => v.iter().map(|&x| u32::from(x)).collect(),
    }
}

/// One random chain of `steps` ops over a `rows x cols` output; asserts fused == op-by-op.
fn chain(seed: u64, rows: usize, cols: usize, steps: usize) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let shape = vec![rows, cols];
    let n = rows * cols;
    let packed = Layout::contiguous(&shape);
    let mut p = Program::default();
    let mut scalars: Vec<u32> = Vec::new();
    let mut inputs: Vec<(CpuStorage, Layout)> = Vec::new();
    let mut vals: Vec<Val> = Vec::new();
    // Inputs: packed f32, a row and a column broadcast, a transposed view, f16, i32, u32, u8.
    let f32s = |rng: &mut Rng, k: usize| (0..k).map(|_| rng.f32()).collect::<Vec<f32>>();
    let transposed = Layout {
        shape: shape.clone(),
        strides: vec![1, rows],
        offset: 0,
    };
    let row = Layout::contiguous(&[1, cols]).broadcast_to(&shape);
    let column = Layout::contiguous(&[rows, 1]).broadcast_to(&shape);
    let sources = [
        (CpuStorage::F32(f32s(&mut rng, n)), packed.clone()),
        (CpuStorage::F32(f32s(&mut rng, cols)), row),
        (CpuStorage::F32(f32s(&mut rng, n)), transposed),
        (
            CpuStorage::F16(
                f32s(&mut rng, rows)
                    .into_iter()
                    .map(f16::from_f32)
                    .collect(),
            ),
            column,
        ),
        (
            CpuStorage::I32((0..n).map(|_| rng.i32()).collect()),
            packed.clone(),
        ),
        (
            CpuStorage::U32((0..n).map(|_| rng.i32() as u32).collect()),
            packed.clone(),
        ),
        (
            CpuStorage::U8((0..n).map(|_| rng.next() as u8 % 3).collect()),
            packed.clone(),
        ),
    ];
    for (s, l) in sources {
        let node = p.input(dtype_of(&s));
        inputs.push((s.clone(), l.clone()));
        vals.push(Val { s, l, node });
    }
    let pick = |rng: &mut Rng, vals: &[Val], want: &dyn Fn(DType) -> bool| -> Option<usize> {
        let ok: Vec<usize> = (0..vals.len()).filter(|&i| want(dt(&vals[i]))).collect();
        (!ok.is_empty()).then(|| ok[rng.below(ok.len())])
    };
    let is_float = |d: DType| matches!(d, DType::F32 | DType::F16);
    let computes = |d: DType| d != DType::U8;
    for _ in 0..steps {
        let kind = rng.below(7);
        let made: Option<(CpuStorage, Expr, DType)> = match kind {
            0 => {
                let op = UnaryOp::ALL[rng.below(UnaryOp::ALL.len())];
                let want = |d: DType| computes(d) && (is_float(d) || !op.float_only());
                pick(&mut rng, &vals, &want).map(|a| {
                    let v = &vals[a];
                    let s = ew::unary(op, &v.s, &v.l).expect("unary");
                    (s, Expr::Unary(op, v.node), dt(v))
                })
            }
            1 | 2 => {
                let op = BinaryOp::ALL[rng.below(BinaryOp::ALL.len())];
                let want = |d: DType| computes(d) && (is_float(d) || !op.float_only());
                pick(&mut rng, &vals, &want).and_then(|a| {
                    let d = dt(&vals[a]);
                    if kind == 1 {
                        // Tensor op tensor: a second operand of the same compute type.
                        let b = pick(&mut rng, &vals, &|e| e == d)?;
                        let (x, y) = (&vals[a], &vals[b]);
                        let s = ew::binary(op, &x.s, &x.l, &y.s, &y.l).expect("binary");
                        Some((s, Expr::Binary(op, x.node, y.node), d))
                    } else {
                        let (sc, b, sd) = scalar_of(d, rng.f32(), rng.i32());
                        let first = rng.below(2) == 0;
                        let x = &vals[a];
                        let s = ew::scalar(op, &x.s, &x.l, sc, first).expect("scalar");
                        scalars.push(b);
                        let c = p.scalar(sd);
                        let (l, r) = if first { (c, x.node) } else { (x.node, c) };
                        Some((s, Expr::Binary(op, l, r), d))
                    }
                })
            }
            3 => {
                let op = CmpOp::ALL[rng.below(CmpOp::ALL.len())];
                let a = rng.below(vals.len());
                let d = dt(&vals[a]);
                if rng.below(2) == 0 {
                    let b = pick(&mut rng, &vals, &|e| e == d).unwrap_or(a);
                    let (x, y) = (&vals[a], &vals[b]);
                    let s = typed::compare(op, &x.s, &x.l, &y.s, &y.l).expect("compare");
                    Some((
                        CpuStorage::U8(s),
                        Expr::Compare(op, x.node, y.node),
                        DType::U8,
                    ))
                } else {
                    let (sc, b, sd) = scalar_of(d, rng.f32(), rng.i32() & 0xff);
                    let x = &vals[a];
                    let s = typed::compare_scalar(op, &x.s, &x.l, sc).expect("compare_scalar");
                    scalars.push(b);
                    let c = p.scalar(sd);
                    Some((CpuStorage::U8(s), Expr::Compare(op, x.node, c), DType::U8))
                }
            }
            4 => pick(&mut rng, &vals, &|d| d == DType::U8).and_then(|m| {
                let a = rng.below(vals.len());
                let d = dt(&vals[a]);
                let b = pick(&mut rng, &vals, &|e| e == d)?;
                let (mv, x, y) = (&vals[m], &vals[a], &vals[b]);
                let CpuStorage::U8(mask) = &mv.s else {
                    return None;
                };
                let s = typed::where_cond(mask, &mv.l, &x.s, &x.l, &y.s, &y.l).expect("where");
                Some((s, Expr::Where(mv.node, x.node, y.node), d))
            }),
            5 => pick(&mut rng, &vals, &computes).map(|a| {
                let d = dt(&vals[a]);
                let (lo, lb, sd) = scalar_of(d, rng.f32(), rng.i32());
                let (hi, hb, _) = scalar_of(d, rng.f32(), rng.i32());
                let x = &vals[a];
                let s = typed::clamp(&x.s, &x.l, lo, hi).expect("clamp");
                scalars.extend([lb, hb]);
                let (l, h) = (p.scalar(sd), p.scalar(sd));
                (s, Expr::Clamp(x.node, l, h), d)
            }),
            _ => {
                let a = rng.below(vals.len());
                let to = [DType::F32, DType::F16, DType::I32, DType::U32, DType::U8][rng.below(5)];
                let x = &vals[a];
                let s = typed::convert(&x.s, &x.l, to).expect("convert");
                Some((s, Expr::Cast(x.node), to))
            }
        };
        if let Some((s, e, d)) = made {
            let node = p.push(e, d);
            vals.push(Val {
                s,
                l: packed.clone(),
                node,
            });
            let views: Vec<(&CpuStorage, &Layout)> = inputs.iter().map(|(s, l)| (s, l)).collect();
            let got = run("chain", &p, &views, &scalars, &shape).expect("fused run");
            let want = &vals.last().expect("pushed").s;
            assert_eq!(dtype_of(&got), dtype_of(want), "seed {seed}: {e:?}");
            assert!(
                bits(&got) == bits(want),
                "seed {seed}, {rows}x{cols}: fused bits differ from op-by-op after {:?}",
                p.nodes
            );
        }
    }
}

#[test]
fn random_chains_match_op_by_op_bits() {
    // Around the block (4096) and parallel-task edges; 0 and 1 elements.
    let shapes = [(0, 5), (1, 1), (63, 65), (17, 241), (5, 819), (70, 1000)];
    for (i, &(r, c)) in shapes.iter().enumerate() {
        for k in 0..6 {
            chain(1 + (i * 100 + k) as u64, r, c, 14);
        }
    }
}

#[test]
fn a_million_elements_match_op_by_op_bits() {
    chain(7, 1000, 1000, 6);
}

#[test]
fn random_and_index_nodes_match_their_host_twins() {
    let n = 3 * BLOCK + 17;
    for dist in [Dist::Uniform, Dist::Normal] {
        let mut p = Program::default();
        let (seed, offset) = (0x1234_5678_9abc_def0_u64, 40_000_u64);
        let w = [0; 4].map(|_| p.scalar(DType::U32));
        p.push(Expr::Random(dist, w), DType::F32);
        let sc = [seed as u32, (seed >> 32) as u32, offset as u32, 0];
        let got = run("rand", &p, &[], &sc, &[n]).expect("fused rand");
        let want = sample_host(dist, seed, offset, n).expect("host rand");
        assert!(bits(&got) == bits(&CpuStorage::F32(want)), "{dist:?}");
    }
    // arange: start + f32(e) * step, as `elementwise::arange`.
    let p = Program::arange();
    let got = run(
        "arange",
        &p,
        &[],
        &[(-3.5f32).to_bits(), 0.1f32.to_bits()],
        &[n],
    )
    .expect("fused arange");
    let want = ew::arange(n, -3.5, 0.1).expect("arange");
    assert!(bits(&got) == bits(&CpuStorage::F32(want)));
}

#[test]
fn malformed_programs_are_errors() {
    assert!(run("empty", &Program::default(), &[], &[], &[3]).is_err());
    let mut p = Program::default();
    let x = p.input(DType::F32);
    p.push(Expr::Unary(UnaryOp::ALL[0], x), DType::F32);
    assert!(run("unbound", &p, &[], &[], &[3]).is_err());
}
