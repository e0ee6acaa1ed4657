//! C `printf("%g")` formatting, as http_load uses for its report.
//!
//! `%g` with precision P (6 by default) rounds to P significant digits; if
//! the decimal exponent X of the rounded value satisfies `-4 <= X < P` the
//! value is printed in fixed notation with `P - 1 - X` decimals, otherwise in
//! exponential notation with `P - 1` decimals and at least two exponent
//! digits; trailing zeros (and a trailing point) are removed in both cases.
//! Rounding is correct rounding of the exact binary value, ties to even, as
//! glibc does.

/// `%g`: six significant digits.
pub fn g(x: f64) -> String {
    g_prec(x, 6)
}

/// `%.Pg`.
pub fn g_prec(x: f64, precision: usize) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    let p = precision.max(1);
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Rust's `{:e}` with a precision rounds the exact value, ties to even,
    // and gives the exponent of the rounded value: exactly C's X.
    let e = format!("{:.*e}", p - 1, x);
    let (mantissa, exp) = e.split_once('e').expect("`{:e}` output has an exponent");
    let exp: i32 = exp.parse().expect("`{:e}` exponent is an integer");
    if exp < -4 || exp >= p as i32 {
        let sign = if exp < 0 { '-' } else { '+' };
        format!(
            "{}e{}{:02}",
            strip_zeros(mantissa),
            sign,
            exp.unsigned_abs()
        )
    } else {
        let decimals = (p as i32 - 1 - exp) as usize;
        strip_zeros(&format!("{:.*}", decimals, x)).to_string()
    }
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_c_printf() {
        // Expected strings are what glibc's printf("%g") prints.
        let cases: &[(f64, &str)] = &[
            (0.0, "0"),
            (1.0, "1"),
            (10000.0, "10000"),
            (100000.0, "100000"),
            (999999.0, "999999"),
            (1e6, "1e+06"),
            (1.024e9, "1.024e+09"),
            (0.000123, "0.000123"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-5, "1.5e-05"),
            (123456.5, "123456"),       // tie, to even
            (123457.5, "123458"),       // tie, to even
            (1234565.0, "1.23456e+06"), // tie, to even
            (999999.5, "1e+06"),        // rounds up into the next decade
            (9999995.0, "1e+07"),
            (72.70039, "72.7004"),
            (137.5508, "137.551"),
            (0.223, "0.223"),
            (7444520.6, "7.44452e+06"),
            (-2.5, "-2.5"),
            (1e100, "1e+100"),
            (1.0 / 3.0, "0.333333"),
            (f64::INFINITY, "inf"),
        ];
        for &(x, want) in cases {
            assert_eq!(g(x), want, "%g of {x:?}");
        }
    }

    #[test]
    fn other_precisions() {
        assert_eq!(g_prec(4.56789, 3), "4.57");
        assert_eq!(g_prec(1234.0, 2), "1.2e+03");
        assert_eq!(g_prec(0.5, 0), "0.5");
    }
}
