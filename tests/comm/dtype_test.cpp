#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "comm/reduce.h"
#include "lowcomm/base/error.h"
#include "lowcomm/comm/dtype.h"

using namespace lowcomm::comm;

TEST(DType, HalfRoundTripsEveryFiniteHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;  // inf/nan
    const float f = halfToFloat(static_cast<uint16_t>(h));
    ASSERT_EQ(floatToHalf(f), h) << "half 0x" << std::hex << h;
  }
}

TEST(DType, HalfKnownValuesAndRounding) {
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(1e6f), 0x7c00);           // overflow to inf
  EXPECT_EQ(floatToHalf(1.0f + 1.0f / 2048), 0x3c00);  // tie rounds to even
  EXPECT_EQ(floatToHalf(1.0f + 3.0f / 2048), 0x3c02);
  EXPECT_FLOAT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(NAN))));
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16ToFloat(0x3f80), 1.0f);
  uint32_t u = 0x3f808000;  // exactly halfway between 0x3f80 and 0x3f81: even is 0x3f80
  float f;
  std::memcpy(&f, &u, 4);
  EXPECT_EQ(floatToBf16(f), 0x3f80);
  u = 0x3f818000;  // halfway between 0x3f81 and 0x3f82: even is 0x3f82
  std::memcpy(&f, &u, 4);
  EXPECT_EQ(floatToBf16(f), 0x3f82);
}

TEST(DType, ParseRejectsUnknownNames) {
  EXPECT_EQ(parseDType("bf16"), DType::bf16);
  EXPECT_THROW(parseDType("f8"), lowcomm::ConfigError);
  EXPECT_THROW(parseReduceOp("prod"), lowcomm::ConfigError);
}

TEST(Reduce, Bf16AccumulatesInF32) {
  // 256 + 1 is not representable in bf16 (rounds to 256), but each addition is computed in f32.
  uint16_t a[2] = {floatToBf16(1.5f), floatToBf16(-3.0f)};
  uint16_t b[2] = {floatToBf16(2.25f), floatToBf16(5.0f)};
  reduceInto(a, b, 2, DType::bf16, ReduceOp::sum);
  EXPECT_EQ(bf16ToFloat(a[0]), 3.75f);
  EXPECT_EQ(bf16ToFloat(a[1]), 2.0f);
  reduceInto(a, b, 2, DType::bf16, ReduceOp::max);
  EXPECT_EQ(bf16ToFloat(a[0]), 3.75f);
  EXPECT_EQ(bf16ToFloat(a[1]), 5.0f);
}

TEST(Reduce, IntegerSumsWrapAround) {
  int32_t a[2] = {INT32_MAX, -5};
  int32_t b[2] = {1, 7};
  reduceInto(a, b, 2, DType::i32, ReduceOp::sum);
  EXPECT_EQ(a[0], INT32_MIN);
  EXPECT_EQ(a[1], 2);
  uint8_t c[1] = {250}, d[1] = {10};
  reduceInto(c, d, 1, DType::u8, ReduceOp::sum);
  EXPECT_EQ(c[0], 4);
}
