"""PriceBook: effective prices, overhead, field table, persistence and validation."""

from __future__ import annotations

import dataclasses
import json

import pytest

from kvplan.models.core.calendar import HOURS_PER_MONTH, SECONDS_PER_MONTH
from kvplan.models.core.errors import KvplanError
from kvplan.models.inputs.pricebook import FIELDS, PriceBook


def test_month_is_30_44_days():
    assert HOURS_PER_MONTH == pytest.approx(730.56)  # 30.44 * 24
    assert SECONDS_PER_MONTH == pytest.approx(2_630_016)  # 730.56 * 3600


def test_cloud_price_is_the_hourly_rate():
    pb = PriceBook(pricing_mode="cloud", usd_per_gpu_hour=2.5)
    assert pb.effective_usd_per_gpu_hour() == 2.5
    assert pb.usd_per_gpu_month() == pytest.approx(1826.4)  # 2.5 * 730.56


def test_owned_without_cost_of_capital_is_straight_line_plus_power():
    pb = PriceBook(pricing_mode="owned", capex_usd_per_gpu=36000, amortisation_months=36,
                   power_hosting_usd_per_gpu_month=300, cost_of_capital_annual=0.0)
    assert pb.usd_per_gpu_month() == pytest.approx(1300.0)  # 36000/36 + 300
    assert pb.effective_usd_per_gpu_hour() == pytest.approx(1300.0 / 730.56)


def test_owned_with_cost_of_capital_is_an_annuity():
    # 12,000 over 12 months at 1 %/month: the textbook loan payment is 1,066.19
    pb = PriceBook(pricing_mode="owned", capex_usd_per_gpu=12000, amortisation_months=12,
                   power_hosting_usd_per_gpu_month=0, cost_of_capital_annual=0.12)
    assert pb.capital_usd_per_gpu_month() == pytest.approx(1066.19, abs=0.01)
    assert pb.usd_per_gpu_month() == pytest.approx(1066.19, abs=0.01)


def test_cloud_mode_ignores_capex():
    a = PriceBook(pricing_mode="cloud", usd_per_gpu_hour=3.0, capex_usd_per_gpu=1.0)
    b = PriceBook(pricing_mode="cloud", usd_per_gpu_hour=3.0, capex_usd_per_gpu=99999.0)
    assert a.effective_usd_per_gpu_hour() == b.effective_usd_per_gpu_hour() == 3.0


def test_cache_overhead_sums_service_memory_disk_and_ops():
    pb = PriceBook(cache_service_node_usd_per_month=100, gpus_per_node=8,
                   usd_per_gb_month_cpu_memory=2, cache_tier_gb_cpu=400,
                   usd_per_gb_month_ssd=0.1, cache_tier_gb_ssd=1000,
                   ops_hours_per_month=4, usd_per_ops_hour=100)
    # 20 GPUs -> 3 nodes -> 300; RAM 800; disk 100; ops 400
    assert pb.nodes_for(20) == 3
    assert pb.cache_overhead_usd_per_month(20) == pytest.approx(1600.0)
    assert pb.nodes_for(0) == 0


def test_fields_table_describes_every_field():
    names = [f.name for f in dataclasses.fields(PriceBook)]
    assert [s.name for s in FIELDS] == names
    for spec in FIELDS:
        assert spec.help.strip(), spec.name
        if spec.kind in ("float", "int"):
            assert spec.unit.strip(), spec.name
        assert spec.default == getattr(PriceBook(), spec.name)
    required = {"gpu_type", "usd_per_gpu_hour", "capex_usd_per_gpu", "amortisation_months",
                "power_hosting_usd_per_gpu_month", "pricing_mode",
                "usd_per_gb_month_cpu_memory", "usd_per_gb_month_ssd", "cache_tier_gb_cpu",
                "cache_tier_gb_ssd", "cache_service_node_usd_per_month", "ops_hours_per_month",
                "usd_per_ops_hour", "cost_of_capital_annual", "gpus_per_node"}
    assert required <= set(names)


def test_round_trip_through_json():
    pb = PriceBook(gpu_type="L40S", pricing_mode="owned", capex_usd_per_gpu=9000,
                   amortisation_months=48, gpus_per_node=4)
    again = PriceBook.from_dict(json.loads(json.dumps(pb.to_dict())))
    assert again == pb


def test_from_dict_accepts_form_values():
    pb = PriceBook.from_dict({"usd_per_gpu_hour": 3, "amortisation_months": 24.0})
    assert pb.usd_per_gpu_hour == 3.0 and isinstance(pb.usd_per_gpu_hour, float)
    assert pb.amortisation_months == 24 and isinstance(pb.amortisation_months, int)
    assert pb.gpu_type == PriceBook().gpu_type  # missing keys take defaults


@pytest.mark.parametrize("data, field", [
    ({"usd_per_gpu_hur": 1.0}, "usd_per_gpu_hur"),
    ({"usd_per_gpu_hour": "cheap"}, "usd_per_gpu_hour"),
    ({"usd_per_gpu_hour": -1.0}, "usd_per_gpu_hour"),
    ({"usd_per_gpu_hour": True}, "usd_per_gpu_hour"),
    ({"pricing_mode": "leased"}, "pricing_mode"),
    ({"amortisation_months": 0}, "amortisation_months"),
    ({"amortisation_months": 12.5}, "amortisation_months"),
    ({"cost_of_capital_annual": 1.5}, "cost_of_capital_annual"),
    ({"gpus_per_node": 0}, "gpus_per_node"),
    ({"gpu_type": 7}, "gpu_type"),
    ({"cache_tier_gb_cpu": float("nan")}, "cache_tier_gb_cpu"),
])
def test_from_dict_rejects_bad_values_naming_the_field(data, field):
    with pytest.raises(KvplanError, match=field):
        PriceBook.from_dict(data)


def test_constructor_validates_too():
    with pytest.raises(KvplanError, match="ops_hours_per_month"):
        PriceBook(ops_hours_per_month=-2)


# -- hostile or careless inputs --------------------------------------------------------------
@pytest.mark.parametrize("field, value", [("horizon_months", 10_000_000), ("growth_rate_per_month", 1e6)])
def test_planning_bounds_name_the_field(field, value):
    from kvplan.models.inputs.planning import PlanningInputs

    with pytest.raises(Exception) as e:
        PlanningInputs(**{field: value})
    assert f"PlanningInputs.{field}" in str(e.value)


def test_price_book_bounds():
    from kvplan.models.inputs.pricebook import PriceBook

    with pytest.raises(Exception) as e:
        PriceBook.from_dict({"usd_per_gpu_hour": 1e9})
    assert "usd_per_gpu_hour" in str(e.value)
